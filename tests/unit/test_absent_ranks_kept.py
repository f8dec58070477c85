"""A rank that exited stays worded "exited at/by HH:MM:SS" after the frames that saw it run leave the history (the
Monitor's SeenRunning record, probes/diagnosis/absent_ranks.py), and a job merged across nodes shows the ranks no
node shows running in its Ranks pane, with the node that reported them ("exited with status 1 at 18:54:19 on n2",
"exited by 12:00:05 on n2"). Frames are constructed (tests/support/job_frames.py, cluster_frames.py); a real rank
killed after attach: tests/e2e/test_rank_exits_after_attach_e2e.py.
"""

from __future__ import annotations

import dataclasses
import time

from support.cluster_frames import PID, node_frame
from support.job_frames import ALL_REDUCE, RANK0, T0, count, job_frame, job_info, rank_proc
from support.pilot import pilot_test, table_rows

from probes.diagnosis.absent_ranks import SEEN_RANKS_KEPT, SeenRunning
from probes.frame import ThreadStack
from probes.monitoring.cluster import ClusterMonitor
from probes.monitoring.monitor import Monitor
from probes.sensors.slurm import NoTaskHere, SlurmStep, StepInfo, TaskEnd
from tui.app import make_app
from tui.panes.ranks import absent_ranks

ONE_MACHINE = "MASTER_ADDR 127.0.0.1"
OUTSIDE_PID = 4242
SRUN_LINE = "srun: error: n2: task 1: Exited with exit code 1"


def clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def hand_started(**kw):
    return dataclasses.replace(job_info(kind="ranks", ranks=(RANK0,)), world_size=2, local_world_size=None,
                               launcher_pid=None, **kw)


def seen_then_gone(running: int = 4, gone: int = 30):
    """Rank 1 running outside the watched tree for `running` frames, then missing for `gone`; rank 0 waits."""
    jobs = ([hand_started(ranks_outside=((1, OUTSIDE_PID),))] * running
            + [hand_started(missing_ranks=(1,), one_machine=ONE_MACHINE)] * gone)
    frames = [job_frame(i, [rank_proc(RANK0, 0, cpu=0.5, main_cpu=0.0)],
                        counts=[count(RANK0, ALL_REDUCE, n=5, idle=True)], job=job) for i, job in enumerate(jobs)]
    return [dataclasses.replace(frame, time=T0 + 0.2 + i) for i, frame in enumerate(frames)]


def test_a_rank_stays_exited_after_the_frames_that_saw_it_run_leave_the_history():
    frames = seen_then_gone()
    monitor = Monitor(hang_after_s=5.0, history_frames=10)  # the last frame that saw it run is 27 frames back
    for frame in frames:
        view = monitor.ingest(frame)
    assert all(f.job is not None and not f.job.ranks_outside for f in view.frames), "the seen frames aged out"
    exited = f"exited by {clock(frames[4].time)}"
    assert absent_ranks(view.shown.job, view.shown_frames, view.seen_running) == [("1", exited)]
    assert view.job is not None and view.job.verdict.evidence[0].startswith(
        f"rank 1 of 2 {exited} (PID {OUTSIDE_PID}, seen running outside the watched tree at {clock(frames[3].time)})")
    assert view.job.verdict.advice[0].startswith("Find why rank 1 exited:")


def test_the_record_reads_each_frame_once_and_keeps_the_ranks_seen_last():
    frames = seen_then_gone(running=4, gone=2)
    record = SeenRunning().after(frames[:2]).after(frames[:5]).after(frames[3:])
    assert record == SeenRunning().after(frames)
    assert [(g.rank, g.pid, g.running_at, g.gone_at) for g in record.last] == [
        (1, OUTSIDE_PID, frames[3].time, frames[4].time)]
    many = hand_started(ranks_outside=tuple((rank, 1000 + rank) for rank in range(1, SEEN_RANKS_KEPT + 11)))
    crowd = [dataclasses.replace(frames[0], job=many), dataclasses.replace(frames[1], job=hand_started())]
    kept = SeenRunning().after(crowd).after([crowd[1], dataclasses.replace(frames[2], job=dataclasses.replace(
        many, ranks_outside=((SEEN_RANKS_KEPT + 50, 9),)))] + [frames[3]])
    assert len(kept.last) == SEEN_RANKS_KEPT and SEEN_RANKS_KEPT + 50 in {g.rank for g in kept.last}


# --- merged across nodes ----------------------------------------------------------------------------------------


def rank_0_waits(i: int, kind: str = "slurm"):
    """n1's rank 0 stuck in all_reduce, world of 2."""
    frame = node_frame("n1", i, 0, [count(PID, ALL_REDUCE, n=5, idle=True)], cpu=0.0, main_cpu=0.0,
                       threads=[ThreadStack(pid=PID, tid=PID, name="MainThread", idle=True, frames=ALL_REDUCE)])
    return dataclasses.replace(frame, job=dataclasses.replace(frame.job, kind=kind))


def n2_rank_1_exits(i: int, exits_at: int):
    """n2's frames: its rank 1 running outside the watched tree until frame `exits_at`, then missing there."""
    frame = node_frame("n2", i, 1, [], cpu=0.0)
    job = dataclasses.replace(frame.job, rank_pids=(), ranks_outside=((1, PID),)) if i < exits_at else \
        dataclasses.replace(frame.job, rank_pids=(), missing_ranks=(1,))
    return dataclasses.replace(frame, job=job, processes=tuple(p for p in frame.processes if p.role != "rank"))


def test_the_merge_words_a_rank_whose_task_ended_on_its_node():
    end = TaskEnd("n2", (1,), "Exited with exit code 1", 1, SRUN_LINE, at=T0 - 30)
    step = StepInfo(SlurmStep("12", "0"), "python", "n[1-2]", 2, "n1", 92)
    note = NoTaskHere("12", "n2", (step,), (end,), source="/j.out")
    monitor = ClusterMonitor(hang_after_s=5.0, expected_nodes=["n1", "n2"])
    for i in range(8):
        monitor.add(rank_0_waits(i))
        monitor.no_task_here("n2", note, heard_at=T0 + i + 1)
        monitor.merge(now=T0 + i + 1)
    assert monitor.view.absent_across_nodes == (("1", f"exited with status 1 at {clock(T0 - 30)}", "n2"),)


def test_the_merge_words_a_rank_its_node_saw_exit_even_after_the_history_drops_it():
    monitor = ClusterMonitor(hang_after_s=5.0)
    for node in ("n1", "n2"):  # a short history: the frames that saw rank 1 run age out
        monitor._node(node).monitor = Monitor(hang_after_s=5.0, history_frames=6)
    for i in range(20):
        monitor.ingest(rank_0_waits(i, kind="torchrun"))
        monitor.ingest(n2_rank_1_exits(i, exits_at=3))
    monitor.settle(T0 + 21)
    gone_at = n2_rank_1_exits(3, exits_at=3).time
    assert monitor.view.absent_across_nodes == (("1", f"exited by {clock(gone_at)}", "n2"),)


@pilot_test
async def test_the_merged_rank_table_shows_the_rank_gone_on_n2():
    frames = [f for i in range(12) for f in (rank_0_waits(i, kind="torchrun"), n2_rank_1_exits(i, exits_at=3))]
    app = make_app(replay_frames=frames, clock=lambda: T0 + 13)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert type(app.monitor).__name__ == "ClusterMonitor"
        rows = table_rows(app, "ranks-table")
        gone_at = n2_rank_1_exits(3, exits_at=3).time
        words = f"exited by {clock(gone_at)}"
        assert app.monitor.view.absent_across_nodes == (("1", words, "n2"),)
        # the verdict column is narrow beside the other panes: the words are clipped to it, never other words
        shown = [row[-1] for row in rows if row[0] == "1"]
        assert len(shown) == 1 and len(shown[0]) > 10 and words.startswith(shown[0].rstrip("…")), shown
        assert [row[1] for row in rows if row[0] == "1"] == ["n2"]  # the node in its own column, not clipped away
