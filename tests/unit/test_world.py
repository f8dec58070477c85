"""The job knows its world size: probes/jobs/world.py's accounting of missing ranks and ranks on other nodes, the
tracker's JobInfo fields on a constructed multi-node table, the job diagnosis of a rank gone before gputop
attached, and the ranks pane's rows for both. (The real 2-rank case: tests/e2e/test_launchers_e2e.py.)
"""

from __future__ import annotations

import dataclasses

from support.job_frames import ALL_REDUCE, RANK0, count, job_frame, job_info, rank_proc, run_job, straggler_frames

from probes.frame import JobInfo, from_jsonable, to_jsonable
from probes.jobs.facts import ProcessFacts
from probes.jobs.launchers import launcher_of_kind, parse_dist_env
from probes.jobs.layout import find_layout
from probes.jobs.world import WorldAccount, WorldWatch, account_world, ranges_text, rank_ranges
from tui.panes.ranks import absent_ranks


def test_a_node_holding_the_whole_world_names_the_ranks_it_lacks_as_missing():
    assert account_world(2, 2, 0, seen={0}) == WorldAccount(missing=(1,))
    assert account_world(4, 4, None, seen={0, 2}) == WorldAccount(missing=(1, 3))
    assert account_world(2, 2, 0, seen={0, 1}) == WorldAccount()


def test_a_node_of_a_larger_world_lists_the_other_ranks_as_elsewhere_never_missing():
    assert account_world(4, 2, 0, seen={0, 1}) == WorldAccount(elsewhere=((2, 3),))
    assert account_world(4, 2, 1, seen={2, 3}) == WorldAccount(elsewhere=((0, 1),))
    # Its own block lacks rank 3: that one is missing, the other node's are elsewhere.
    assert account_world(4, 2, 1, seen={2}) == WorldAccount(missing=(3,), elsewhere=((0, 1),))
    # No share stated (RANK and WORLD_SIZE only): the unseen are not called missing.
    assert account_world(4, None, None, seen={0}) == WorldAccount(elsewhere=((1, 3),))
    assert account_world(None, 2, 0, seen={0}) == WorldAccount()


def test_ranges_keep_a_large_world_short():
    assert rank_ranges([7, 2, 3, 4, 9]) == ((2, 4), (7, 7), (9, 9))
    assert ranges_text(((2, 4), (7, 7))) == "2–4, 7"
    assert len(account_world(1024, 8, 3, seen=set(range(24, 32))).elsewhere) == 2


def test_the_watch_remembers_ranks_seen_and_names_a_missing_one_on_its_second_tick():
    watch = WorldWatch()
    # A launcher starts its ranks one after the other: the first read may fall between two starts.
    assert watch.update(2, 2, 0, [0]) == WorldAccount()
    assert watch.update(2, 2, 0, [0]) == WorldAccount(missing=(1,))
    # Seen once, then gone: the diagnosis remembers it as exited; it is never "missing".
    watch = WorldWatch()
    assert watch.update(2, 2, 0, [0, 1]) == WorldAccount()
    assert watch.update(2, 2, 0, [0]) == watch.update(2, 2, 0, [0]) == WorldAccount()


def test_a_multi_node_torchrun_layout_states_its_share_and_node_number():
    agent = facts(10, 1, name="pt_elastic", cmdline=("python3", "-m", "torch.distributed.run", "train.py"))
    table = [agent] + [facts(11 + r, 10, {"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "4",
                                          "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
                                          "TORCHELASTIC_RUN_ID": "job-1", "TORCHELASTIC_RESTART_COUNT": "0"})
                       for r in (0, 1)]
    layout = find_layout(10, table)
    ranks = [f for f in table if f.env.rank is not None]
    share = launcher_of_kind(layout.kind).stated_local_world_size(layout, ranks)
    assert (layout.world_size, share, ranks[0].env.group_rank) == (4, 2, 0)
    assert WorldWatch().update(layout.world_size, share, 0, [0, 1]) == WorldAccount(elsewhere=((2, 3),))


def facts(pid, ppid, environ=None, name="python3", cmdline=("python3", "-u", "train.py")):
    return ProcessFacts(pid=pid, ppid=ppid, role="other", name=name, cmdline=tuple(cmdline), started=pid,
                        python=True, env=parse_dist_env(environ or {}))


def missing_job(**kw) -> JobInfo:
    return dataclasses.replace(job_info(ranks=(RANK0,)), world_size=2, local_world_size=2, **kw)


def test_a_rank_gone_before_attach_is_named_and_the_waiting_rank_is_hung_until_the_timeout():
    frames = [job_frame(i, [rank_proc(RANK0, 0, cpu=0.5, main_cpu=0.0)],
                        counts=[count(RANK0, ALL_REDUCE, n=5, idle=True)], job=missing_job(missing_ranks=(1,)))
              for i in range(8)]
    job = run_job(frames)[-1]
    assert (job.finding, job.responsible_rank) == ("rank_exited", 1)
    assert job.verdict.evidence[0] == (
        "rank 1 of 2 is gone (exited before attach); rank 0 waits in all_reduce: hung until the process group's "
        "timeout (30 min by gloo's default; no rank uses a GPU)")
    assert (job.verdict.bottleneck, job.verdict.liveness) == ("comms_bound", "hung")
    assert [r.rank for r in job.ranks] == [0]


def test_ranks_on_other_nodes_are_never_called_missing():
    multi_node = dataclasses.replace(job_info(), world_size=4, local_world_size=2, ranks_elsewhere=((2, 3),))
    frames = [dataclasses.replace(frame, job=multi_node) for frame in straggler_frames(10)]
    job = run_job(frames)[-1]
    assert (job.finding, job.responsible_rank) == ("straggler", 1)
    assert "gone" not in "\n".join(job.verdict.evidence)


def test_the_pane_lists_missing_ranks_and_ranks_elsewhere_and_the_fields_round_trip():
    info = missing_job(missing_ranks=(1,), ranks_elsewhere=((4, 7),))
    assert absent_ranks(info) == [("1", "gone (exited before attach)"), ("4–7", "not on this node")]
    assert absent_ranks(job_info()) == [] and absent_ranks(None) == []
    assert from_jsonable(JobInfo, to_jsonable(info)) == info
