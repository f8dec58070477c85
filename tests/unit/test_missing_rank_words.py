"""A rank of the world missing here is worded as measured (probes/diagnosis/absent_ranks.py), in the job's verdict
and in the Ranks pane alike: seen running outside the watched tree and then gone, "exited at 12:00:04" (or "exited
by 12:00:05" where the frames on either side of its end fall in two seconds); never seen on a job that runs only on
this machine, "not running"; never seen where its launcher placed it, "gone (exited before attach)"; where the job
does not show where it runs, "not on this node". The Locator (probes/jobs/locality.py) reads again as soon as a rank
it found running here has ended, so the frames bracket its end within a tick. A real rank killed after attach:
tests/e2e/test_rank_exits_after_attach_e2e.py.
"""

from __future__ import annotations

import dataclasses
import time

from support.job_frames import ALL_REDUCE, RANK0, T0, count, job_frame, job_info, rank_proc, run_job
from support.pilot import pilot_test, table_rows
from textual.widgets import DataTable

from probes.diagnosis.absent_ranks import (
    SeenGone,
    exit_words,
    missing_advice,
    missing_head,
    missing_rank_words,
    ranks_seen_gone,
)
from probes.jobs import locality
from probes.jobs.facts import ProcessFacts
from probes.jobs.locality import Locator, Placement
from tui.app import make_app
from tui.panes.ranks import absent_ranks

ONE_MACHINE = "MASTER_ADDR 127.0.0.1"
OUTSIDE_PID = 4242


def hand_started(**kw):
    return dataclasses.replace(job_info(kind="ranks", ranks=(RANK0,)), world_size=2, local_world_size=None,
                               launcher_pid=None, **kw)


def clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def frames_of(jobs, start: float = T0):
    """One frame a second from `start`, rank 0 waiting in all_reduce, each with the JobInfo of `jobs` in turn."""
    frames = [job_frame(i, [rank_proc(RANK0, 0, cpu=0.5, main_cpu=0.0)],
                        counts=[count(RANK0, ALL_REDUCE, n=5, idle=True)], job=job) for i, job in enumerate(jobs)]
    return [dataclasses.replace(frame, time=start + i) for i, frame in enumerate(frames)]


def seen_then_gone(start: float = T0 + 0.2, running: int = 4, gone: int = 6):
    """Rank 1 found running outside the watched tree for `running` frames, then missing (the job runs only on
    this machine) for `gone`."""
    return frames_of([hand_started(ranks_outside=((1, OUTSIDE_PID),))] * running
                     + [hand_started(missing_ranks=(1,), one_machine=ONE_MACHINE)] * gone, start)


def test_the_frames_on_either_side_of_its_end_are_found():
    frames = seen_then_gone()
    assert ranks_seen_gone(frames, (1,)) == {1: SeenGone(1, OUTSIDE_PID, frames[3].time, frames[4].time)}
    assert ranks_seen_gone(frames[4:], (1,)) == {}, "seen before the frames kept: not known"
    assert ranks_seen_gone(frames, (2,)) == {}


def test_exit_words_are_no_more_precise_than_the_frames():
    within_a_second = SeenGone(1, OUTSIDE_PID, running_at=T0 + 0.1, gone_at=T0 + 0.6)
    assert exit_words(within_a_second) == f"exited at {clock(T0)}"
    across_seconds = SeenGone(1, OUTSIDE_PID, running_at=T0 + 0.6, gone_at=T0 + 1.6)
    assert exit_words(across_seconds) == f"exited by {clock(T0 + 1)}"


def test_each_missing_rank_is_worded_by_what_was_measured():
    gone = {1: SeenGone(1, OUTSIDE_PID, running_at=T0 + 0.1, gone_at=T0 + 0.6)}
    one_machine = hand_started(missing_ranks=(1, 2), one_machine=ONE_MACHINE)
    assert missing_rank_words(one_machine, 1, gone) == f"exited at {clock(T0)}"
    assert missing_rank_words(one_machine, 2, gone) == "not running"
    placed = dataclasses.replace(job_info(ranks=(RANK0,)), world_size=2, local_world_size=2, missing_ranks=(1,))
    assert missing_rank_words(placed, 1, {}) == "gone (exited before attach)"


def test_the_pane_says_exited_not_running_or_elsewhere_never_exited_before_attach_for_a_rank_it_saw():
    frames = seen_then_gone()
    assert absent_ranks(frames[-1].job, frames) == [("1", f"exited by {clock(frames[4].time)}")]
    never_seen = hand_started(missing_ranks=(1,), one_machine=ONE_MACHINE)
    assert absent_ranks(never_seen, frames_of([never_seen] * 3)) == [("1", "not running")]
    untold = hand_started(ranks_elsewhere=((1, 1),))
    assert absent_ranks(untold, frames_of([untold] * 3)) == [("1", "not on this node")]


def test_the_verdict_names_a_rank_seen_then_gone_as_exited_with_how_it_is_known():
    frames = seen_then_gone()
    job = run_job(frames)[-1]
    assert (job.finding, job.responsible_rank, job.verdict.liveness) == ("rank_exited", 1, "hung")
    assert job.verdict.evidence[0] == (
        f"rank 1 of 2 exited by {clock(frames[4].time)} (PID {OUTSIDE_PID}, seen running outside the watched tree at "
        f"{clock(frames[3].time)}); rank 0 waits for it in all_reduce: hung until the process group's timeout "
        "(30 min by gloo's default; no rank uses a GPU)")
    assert job.verdict.advice[0] == ("Find why rank 1 exited: the terminal or log it was started from has the exit "
                                     "code and traceback; dmesg shows whether the OOM killer ended it.")


def test_a_rank_seen_then_gone_beside_one_never_seen_is_told_apart():
    frames = frames_of([hand_started(ranks_outside=((1, OUTSIDE_PID),))] * 3
                       + [hand_started(missing_ranks=(1, 2), one_machine=ONE_MACHINE)] * 2, T0 + 0.1)
    job = frames[-1].job
    head, waits_for = missing_head(job, (1, 2), 3, frames)
    assert head == (f"rank 1 of 2 exited by {clock(frames[3].time)} (PID {OUTSIDE_PID}, seen running outside the "
                    f"watched tree at {clock(frames[2].time)}); rank 2 of 2 is not running (the job runs only on this "
                    f"machine: {ONE_MACHINE})")
    assert waits_for == " for them"
    assert missing_advice(job, (1, 2), 3, frames).startswith(
        "Find why rank 1 exited: the terminal or log it was started from has the exit code and traceback; Find why "
        "rank 2 is not running")


def facts(pid: int) -> ProcessFacts:
    return ProcessFacts(pid=pid, ppid=1, role="rank", name="python", cmdline=("python", "train.py"), python=True)


def test_the_locator_reads_again_as_soon_as_a_rank_it_found_running_here_has_ended(monkeypatch):
    reads = []
    alive = {OUTSIDE_PID: True}

    def read(ranks, unseen, tree):
        reads.append(unseen)
        return Placement(one_machine=ONE_MACHINE,
                         running_here=((1, OUTSIDE_PID),) if alive[OUTSIDE_PID] else ())

    monkeypatch.setattr(Locator, "_read", staticmethod(read))
    monkeypatch.setattr(locality, "read_environ",
                        lambda pid: {"RANK": "1"} if pid == OUTSIDE_PID and alive[pid] else {})
    locator = Locator(clock=lambda: 0.0)  # never due by the clock
    assert locator.place([facts(10)], (1,), {10}).running_here == ((1, OUTSIDE_PID),)
    assert locator.place([facts(10)], (1,), {10}).running_here == ((1, OUTSIDE_PID),)
    assert len(reads) == 1, "a rank still running: the last reading holds"
    alive[OUTSIDE_PID] = False
    assert locator.place([facts(10)], (1,), {10}).running_here == ()
    assert len(reads) == 2


@pilot_test
async def test_the_ranks_pane_shows_a_rank_seen_then_gone_as_exited_in_red():
    frames = seen_then_gone()
    app = make_app(replay_frames=frames, clock=lambda: frames[-1].time + 1)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        rows = table_rows(app, "ranks-table")
        words = app.query_one("#ranks-table", DataTable).get_row_at(1)[-1]
    assert [(row[0], row[-1]) for row in rows] == [("0", rows[0][-1]), ("1", f"exited by {clock(frames[4].time)}")]
    assert words.style == "bold red", "a rank this node should hold and does not"
