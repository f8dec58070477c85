"""A rank gputop saw running and that exited later is named as exited, with when, never as "exited before attach".

Two gloo ranks started apart, as from two terminals (tests/targets/hand_started_rank.py, rank 1 leaving a `sleep`
that holds its sockets, so rank 0 waits in all_reduce): gputop attached to rank 0 finds rank 1 running outside the
watched tree, then rank 1 is killed. The job's verdict and the Ranks pane (the real app, on the frames of the run)
say it exited and by when, from the frames on either side of its end. The words on constructed frames:
tests/unit/test_missing_rank_words.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

import psutil
import pytest
from support.hand_started import by_hand, gone, logged_pid
from support.pilot import pilot_test, table_rows
from support.processes import free_port, wait_for
from support.real_jobs import START_TIMEOUT_S, kill_job, watching

from probes.monitoring.monitor import Monitor
from tui.app import make_app

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]  # torch's import in two ranks on a busy 2-core machine

HANG_AFTER_S = 5.0


def clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def end_bracket(frames, rank: int) -> tuple[float, float, int]:
    """(the last frame's time that found `rank` running outside the watched tree, the next frame's, its PID)."""
    index = max(i for i, f in enumerate(frames[:-1]) if f.job is not None and rank in dict(f.job.ranks_outside))
    return frames[index].time, frames[index + 1].time, dict(frames[index].job.ranks_outside)[rank]


@pilot_test
async def ranks_pane_rows(frames) -> list[list[str]]:
    """The Ranks pane's rows in the real app, replaying `frames` and shown at the last."""
    app = make_app(replay_frames=frames, clock=lambda: frames[-1].time + 1)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        return table_rows(app, "ranks-table")


def test_a_rank_seen_running_outside_the_tree_and_killed_after_attach_is_said_to_have_exited(tmp_path):
    port = free_port()
    first, second = by_hand("sleep", port, tmp_path, ranks="0"), by_hand("sleep", port, tmp_path, ranks="1")
    try:
        rank1 = wait_for(lambda: logged_pid(tmp_path / "r1.log", r"rank 1 ready PID (\d+)"), timeout=START_TIMEOUT_S)
        rank0 = wait_for(lambda: logged_pid(tmp_path / "r0.log", r"rank 0 ready PID (\d+)"), timeout=START_TIMEOUT_S)
        monitor = Monitor(hang_after_s=HANG_AFTER_S)
        with watching(rank0) as watch:
            watch.until(lambda f: monitor.ingest(f) is not None and f.job is not None
                        and f.job.ranks_outside == ((1, rank1),))
            killed_at = time.time()
            os.kill(rank1, signal.SIGKILL)
            wait_for(lambda: gone(rank1), timeout=START_TIMEOUT_S)

            def named(frame) -> bool:  # rank 1 missing, and rank 0 seen waiting for it (hung: every live rank waits)
                job = monitor.ingest(frame).job
                return job is not None and job.finding == "rank_exited" and job.verdict.liveness == "hung" and \
                    frame.job.missing_ranks == (1,)
            watch.until(named)
        view = monitor.view
        assert view is not None and view.job is not None
        head = view.job.verdict.evidence[0]
        running_at, gone_at, pid = end_bracket(watch.seen, 1)
        assert pid == rank1 and gone_at >= killed_at, "found gone only after it was killed"
        # As precise as the frames on either side of its end: "exited at" within one second, else "exited by".
        words = f"exited at {clock(gone_at)}" if clock(running_at) == clock(gone_at) else f"exited by {clock(gone_at)}"
        assert head.startswith(f"rank 1 of 2 {words} (PID {rank1}, seen running outside the watched tree"), head
        assert "rank 0 waits for it in all_reduce" in head, head
        assert "before attach" not in head and "not running" not in head
        assert view.job.verdict.advice[0].startswith("Find why rank 1 exited: the terminal or log it was started")

        rows = ranks_pane_rows(watch.seen)
        assert [(row[0], row[-1]) for row in rows[1:]] == [("1", words)], rows
    finally:
        helper = logged_pid(tmp_path / "r1.log", r"helper PID (\d+)")
        kill_job(first)
        kill_job(second)
        if helper is not None:
            with contextlib.suppress(psutil.Error):
                psutil.Process(helper).kill()
