"""The merge across nodes (probes/monitoring/cluster.py) on constructed frames: two nodes whose ranks carry the same
node-local PIDs, the straggler and the hung rank named with their node, a lost node (stream ended, or silent)
while the other goes on, a node whose GPUs clock lower, the snapshot's `nodes` and ranks' `node`, and a
recording of the merged job folding back to the same verdict.

Frames are built with tests/support/cluster_frames.py (gloo DDP ranks as py-spy shows them, on several nodes).
"""

from __future__ import annotations

import dataclasses

from support.cluster_frames import PID, many_ranks_round, node_frame, straggler_round
from support.job_frames import (
    ALL_REDUCE,
    FLUSH_METRICS,
    FORWARD,
    T0,
    count,
)

from probes.diagnosis.job_across_nodes import diagnose_job_across_nodes
from probes.frame import GpuDevice, GpuReading, ThreadStack, to_jsonable
from probes.monitoring.cluster import ClusterMonitor, parse_frame_line
from probes.outputs.recording import json_line, read_recording, recording_header


def fold_rounds(rounds, **kw) -> ClusterMonitor:
    monitor = ClusterMonitor(**kw)
    for frames in rounds:
        for frame in frames:
            monitor.add(frame)
        monitor.merge(now=frames[-1].time)
    return monitor


def test_one_node_alone_cannot_say_who_holds_the_job_but_the_merge_names_rank_and_node():
    monitor = fold_rounds([straggler_round(i) for i in range(8)])
    job = monitor.view.job
    assert (job.finding, job.responsible_rank, job.verdict.bottleneck) == ("straggler", 1, "data_bound")
    assert job.verdict.evidence[0].startswith("rank 1 on n2 is the straggler: 80% of its samples in slow_augment")
    assert [(r.rank, r.node, r.pid) for r in job.ranks] == [(0, "n1", PID), (1, "n2", PID)]
    # Each node keeps its own history: n1's frames never hold n2's process.
    n1 = monitor.nodes["n1"].monitor.view
    assert all(f.node == "n1" and [p.rank for p in f.processes if p.role == "rank"] == [0] for f in n1.frames)
    assert [s.line() for s in monitor.statuses] == ["n1: 1 rank · comms_bound", "n2: 1 rank · data_bound"]


def test_the_same_judgement_as_one_node_names_the_hung_rank_and_its_node():
    def stuck(node, i, rank, stack):
        return node_frame(node, i, rank, [count(PID, stack, n=5, idle=True)], cpu=0.0, main_cpu=0.0,
                          threads=[ThreadStack(pid=PID, tid=PID, name="MainThread", idle=True, frames=stack)])

    training = [[node_frame(n, i, r, [count(PID, FORWARD, n=5)], cpu=100.0) for n, r in (("n1", 0), ("n2", 1))]
                for i in range(4)]
    hung = [[stuck("n1", i, 0, ALL_REDUCE), stuck("n2", i, 1, FLUSH_METRICS)] for i in range(4, 16)]
    job = fold_rounds(training + hung, hang_after_s=5.0).view.job
    assert (job.finding, job.responsible_rank, job.verdict.liveness) == ("hung_rank", 1, "hung")
    assert job.verdict.evidence[0].startswith("rank 1 on n2 stuck in flush_metrics (train.py:12) for ")
    assert job.verdict.evidence[0].endswith("; rank 0 waits for it in all_reduce")
    assert any(f"(py-spy dump --pid {PID} on n2)" in line for line in job.verdict.advice), job.verdict.advice


def test_a_node_whose_stream_ends_is_lost_with_its_time_and_the_other_goes_on():
    monitor = fold_rounds([straggler_round(i) for i in range(4)])
    monitor.node_ended("n2", "its agent's stream ended (exit status 143)", at=T0 + 5.5)
    for i in range(4, 7):
        monitor.add(straggler_round(i)[0])
        view = monitor.merge(now=T0 + i + 1)
    n1, n2 = view.nodes
    assert (n1.state, n2.state, n2.lost_at) == ("live", "lost", T0 + 5.5)
    assert "lost at" in n2.line() and "stream ended" in n2.line()
    assert [r.node for r in view.job.ranks] == ["n1"]  # the lost node's ranks are not judged
    assert any(line.startswith("n2: lost at") and line.endswith("its ranks are not judged")
               for line in view.verdict.evidence)
    assert view.latest.node == "n1" and view.latest.time == T0 + 7


def test_a_silent_node_is_lost_after_its_interval_count_and_comes_back_when_it_answers():
    monitor = fold_rounds([straggler_round(i) for i in range(3)], lost_after_s=4.0)
    for i in range(3, 9):  # only n1 answers
        monitor.add(straggler_round(i)[0])
        monitor.merge(now=T0 + i + 1)
    lost = {s.name: s for s in monitor.statuses}["n2"]
    assert lost.state == "lost" and lost.lost_at == T0 + 3 + 4.0 and lost.reason.startswith("silent")
    monitor.add(straggler_round(9)[1])
    monitor.merge(now=T0 + 10)
    assert {s.name: s.state for s in monitor.statuses} == {"n1": "live", "n2": "live"}


def test_a_node_whose_gpus_clock_lower_is_named():
    def gpu(clock):
        return GpuReading(available=True, devices=(GpuDevice(index=0, name="NVIDIA H200", sm_clock_mhz=clock,
                                                             max_sm_clock_mhz=1980, in_target=True),))

    monitor = fold_rounds([straggler_round(i, gpu(1980), gpu(1200)) for i in range(3)])
    assert "n2's GPUs clock at 1200 MHz against 1980 MHz on n1: its ranks run slower (power, heat or a clock " \
           "limit there)" in monitor.view.verdict.evidence


def test_snapshot_lists_each_rank_with_its_node_and_the_nodes():
    monitor = fold_rounds([straggler_round(i) for i in range(6)])
    monitor.node_ended("n2", "its agent's stream ended", at=T0 + 6.5)
    monitor.merge(now=T0 + 7)
    document = monitor.snapshot()
    assert [n["name"] for n in document["nodes"]] == ["n1", "n2"]
    assert document["nodes"][1]["state"] == "lost" and document["nodes"][1]["lost_at"] == T0 + 6.5
    assert [(r["rank"], r["node"]) for r in document["job"]["ranks"]] == [(0, "n1")]


def test_the_snapshot_says_whose_processes_and_stacks_it_holds_when_two_nodes_share_a_pid():
    document = fold_rounds([straggler_round(i) for i in range(6)]).snapshot()
    assert [(r["rank"], r["node"], r["pid"]) for r in document["job"]["ranks"]] == [(0, "n1", PID), (1, "n2", PID)]
    assert document["frames_node"] == "n1"  # PID 501 in `processes` and `stacks` is n1's rank 0, not n2's rank 1
    assert [p["pid"] for p in document["stacks"]["by_process"]] == [PID]
    assert not any("slow_augment" in h["function"] for h in document["stacks"]["by_process"][0]["hot_frames"])


def test_a_recording_of_the_merged_job_replays_to_the_same_verdict(tmp_path):
    path = tmp_path / "job.jsonl"
    rounds = [straggler_round(i) for i in range(8)]
    path.write_text(json_line(recording_header({"across_nodes": True}))
                    + "".join(json_line(to_jsonable(f)) for frames in rounds for f in frames))
    replay = ClusterMonitor(replay=True)
    for frame in read_recording(path):
        replay.ingest(frame)
    assert replay.view.job.verdict.evidence[0] == fold_rounds(rounds).view.job.verdict.evidence[0]
    assert {s.name for s in replay.statuses} == {"n1", "n2"}


def test_an_agent_line_is_a_frame_the_header_or_nothing():
    frame = straggler_round(0)[1]
    assert parse_frame_line(json_line(to_jsonable(frame))).node == "n2"
    assert parse_frame_line(json_line(recording_header({"node": "n2"})))["node"] == "n2"
    assert parse_frame_line("srun: error: Unable to create step for job 12") is None
    assert parse_frame_line("[1, 2]") is None


def test_frames_that_came_after_the_last_round_are_merged_before_the_merge_stops():
    """SIGTERM between two rounds: the frames already read (and recorded) are in the view the snapshot is made
    from, so the snapshot says what the recording says."""
    import threading
    import time

    from probes.monitoring.cluster import AgentSpec, StreamEvent, run_merge

    stop = threading.Event()
    rounds = [straggler_round(i) for i in range(8)]

    class Streams:  # the stream events of AgentStreams, without agents: every round at once, then SIGTERM
        specs = (AgentSpec("n1", ()), AgentSpec("n2", ()))

        def events(self, timeout: float) -> list[StreamEvent]:
            stop.set()
            return [StreamEvent(f.node, frame=f, heard_at=time.time()) for frames in rounds for f in frames]

    monitor = ClusterMonitor()
    views = []
    run_merge(Streams(), monitor, stop, interval_s=3600.0, on_view=views.append)  # no round falls due
    assert len(views) == 1 and monitor.view is views[0]
    assert monitor.view.job.finding == "straggler" and monitor.view.latest.time == rounds[-1][-1].time


def test_no_node_with_a_job_gives_no_verdict():
    frame = dataclasses.replace(node_frame("n1", 0, 0, [], cpu=1.0), job=None)
    assert diagnose_job_across_nodes({"n1": [frame]}) is None


def test_gputop_ssh_command_replaces_ssh_and_batch_mode_is_still_added(monkeypatch):
    from tui.across_nodes import ssh_agent_command

    argv = ["/opt/venv/bin/python", "-m", "tui", "agent", "--follow"]
    monkeypatch.delenv("GPUTOP_SSH_COMMAND", raising=False)
    assert ssh_agent_command("n7", argv)[:2] == ("ssh", "-o")
    monkeypatch.setenv("GPUTOP_SSH_COMMAND", "/usr/bin/ssh -i '/tmp/my key' -F /dev/null -o IdentitiesOnly=yes")
    command = ssh_agent_command("n7", argv)
    assert command[:10] == ("/usr/bin/ssh", "-i", "/tmp/my key", "-F", "/dev/null", "-o", "IdentitiesOnly=yes",
                            "-o", "BatchMode=yes", "-o")
    assert command[11:13] == ("n7", "--") and command[-1].endswith("/opt/venv/bin/python -m tui agent --follow")
    monkeypatch.setenv("GPUTOP_SSH_COMMAND", "   ")  # set but empty: plain ssh, as when unset
    assert ssh_agent_command("n7", argv)[0] == "ssh"


def test_a_host_whose_agent_names_its_node_otherwise_is_one_node_not_two():
    """--hosts 10.99.0.11,n2: the first agent's frames say n1 (its hostname); n1 takes the waited-for name's place."""
    monitor = ClusterMonitor(expected_nodes=["10.99.0.11", "n2"])
    for i in range(4):
        for frame in straggler_round(i):
            if frame.node == "n1":
                monitor.renamed("10.99.0.11", "n1")
            monitor.add(frame)
        monitor.merge(now=frame.time)
    assert [(s.name, s.state) for s in monitor.statuses] == [("n1", "live"), ("n2", "live")]
    assert monitor.view.job.responsible_rank == 1
    monitor.renamed("n2", "n2-again")  # a node that already sent frames under its name keeps it
    assert "n2" in monitor.nodes


def test_ranks_that_agree_are_one_group_like_their_first_and_the_straggler_stays_apart():
    from probes.monitoring.cluster import SUMMARY_MIN_RANKS, agreeing_ranks

    monitor = fold_rounds([many_ranks_round(i) for i in range(8)])
    job = monitor.view.job
    assert (job.finding, job.responsible_rank, len(job.ranks)) == ("straggler", 7, 20) and 20 > SUMMARY_MIN_RANKS
    (group,) = agreeing_ranks(job)
    assert group.like.rank == 0 and [r.rank for r in group.others] == [*range(1, 7), *range(8, 20)]
    assert group.nodes_text == "n2..n20"  # natural order: n2 before n10
    low, high = group.waits
    assert group.line() == f"ranks 1–6, 8–19 on n2..n20: {group.like.verdict.bottleneck}, waits {100 * low:.0f}%–" \
                           f"{100 * high:.0f}%, like rank 0"
    # The rank a person selected is never folded away: (node, pid), since every node's rank has PID 501.
    (kept,) = agreeing_ranks(job, keep=[("n4", PID)])
    assert 3 not in [r.rank for r in kept.others] and len(kept.others) == 17

    document = monitor.snapshot()
    assert len(document["job"]["ranks"]) == 20  # every rank stays in the snapshot; the groups are beside them
    (summary,) = document["job"]["rank_groups"]
    assert (summary["like_rank"], summary["ranks"], summary["count"]) == (0, [[1, 6], [8, 19]], 18)
    assert summary["nodes"][:3] == ["n2", "n3", "n4"] and summary["line"] == group.line()


def test_a_few_ranks_get_no_groups_in_the_snapshot():
    assert "rank_groups" not in fold_rounds([straggler_round(i) for i in range(6)]).snapshot()["job"]
