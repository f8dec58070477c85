"""The one fold from frames to what people see: every front end (the TUI, the headless snapshot, replay,
the `s` key, tests) hands frames to a Monitor and reads the immutable MonitorView it returns.

A Monitor owns the bounded History, calls diagnose() once per frame with the previous verdict (for a
distributed job, diagnose_job(): one diagnose() per rank, and the job's verdict is the one shown), keeps the
verdict timeline, feeds the recorder, and follows the job's own pace (its log) against the baseline. Folding
a recording costs one diagnose() per frame (per rank) over the bounded window, so replays are linear in their
length.

Used by one thread at a time (the sampling worker live, the main thread for replays and snapshots); what it
hands out is immutable, so the UI thread never reads a structure another thread is changing.
"""

from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from probes.diagnosis.absent_ranks import SeenRunning
from probes.diagnosis.gpu_memory_risk import gpu_memory_risk
from probes.diagnosis.job import diagnose_job
from probes.diagnosis.machine_faults import gpu_faults
from probes.diagnosis.memory_risk import memory_risk
from probes.diagnosis.nccl_view import nccl_lines
from probes.diagnosis.shares import time_shares
from probes.diagnosis.shown import shown_verdict
from probes.diagnosis.verdict import DEFAULT_HANG_AFTER_S, diagnose
from probes.doctor import Check, blind_spots
from probes.frame import Frame, JobVerdict, ProgressReading, Verdict
from probes.monitoring.history import DEFAULT_HISTORY_FRAMES, History
from probes.outputs.recording import Recorder
from probes.outputs.snapshot import build_snapshot
from probes.reference.baseline import ComparisonInputs, compare_progress, target_gpu_name
from probes.reference.job_pace import Pace
from probes.reference.pace_inputs import pace_inputs_document
from probes.view import MonitorView, VerdictChange

TIMELINE_LIMIT = 50
PACE_POINTS = 60  # s/iter readings kept for the sparkline: the last minutes of a run's pace
# CPython keeps freed tuples (up to 2000 of each length), dicts, lists and floats on free lists for reuse, and
# empties them only in a full collection, which a process whose garbage all goes by reference counting seldom
# runs. Each tick frees a frame's worth of objects leaving the History, so the lists fill between those
# collections and the heap grows with the same frames alive. One full collection a minute keeps them level
# (what it costs and what it saved: docs/benchmarks.md, "A full collection once a minute").
FULL_COLLECTION_EVERY_S = 60.0
_last_full_collection = time.monotonic()  # one clock for the process: the free lists are the interpreter's


def collect_now_and_then(now: float | None = None) -> bool:
    """Run a full collection if FULL_COLLECTION_EVERY_S have passed since the last (any Monitor's); whether it ran.
    By wall time, not frame time, so that a replay folding an hour's frames in seconds does not collect each
    minute of them."""
    global _last_full_collection
    now = time.monotonic() if now is None else now
    if now - _last_full_collection < FULL_COLLECTION_EVERY_S:
        return False
    _last_full_collection = now
    gc.collect()
    return True


# One short line at 80 columns: that there is no pace, why, and how to get it. The log probe's own reason (which
# process's stdout is a pipe, which file has no step lines) replaces the first where it has one.
NO_LOG_HINT = "no pace: no log of the job's step lines found; --log PATH reads one"
NO_LOG_IN_RECORDING = "no pace recorded (record with --log PATH for s/iter and MFU)"


def recording_meta(pid: int | None, hang_after_s: float, comparison: ComparisonInputs | None = None) -> dict[str, Any]:
    """The header every recording carries, whichever front end wrote it."""
    meta: dict[str, Any] = {"pid": pid, "hang_after_s": hang_after_s}
    if comparison is not None:
        # model, tokens_per_iter and baseline for readers of older recordings; pace_inputs is what replay reads back
        meta.update(model=comparison.model, tokens_per_iter=comparison.tokens_per_iter,
                    baseline=comparison.baseline_path, pace_inputs=pace_inputs_document(comparison))
    return meta


class Monitor:
    """Folds frames into history, verdict, timeline, recording and pace; see the module docstring."""

    def __init__(self, *, hang_after_s: float = DEFAULT_HANG_AFTER_S, comparison: ComparisonInputs | None = None,
                 recorder: Recorder | None = None, replay: bool = False,
                 history_frames: int = DEFAULT_HISTORY_FRAMES, startup_checks: tuple[Check, ...] = ()) -> None:
        """startup_checks: what `gputop doctor`'s checks found not ok on attach (probes.doctor.startup_blind_spots),
        carried into every view beside what the frames themselves show."""
        self.hang_after_s = hang_after_s
        self.startup_checks = startup_checks
        self.comparison = comparison
        self.replay = replay
        self.history = History(history_frames)
        self.recorder = recorder
        self.record_problem: str | None = None  # set once, when a write fails; monitoring goes on
        self._verdict: Verdict | None = None  # diagnose's own, fed back to it for stability
        self._job: JobVerdict | None = None  # diagnose_job's own, likewise
        self._seen_running = SeenRunning()  # when each rank was last seen running: kept past the history's window
        self._timeline: list[VerdictChange] = []
        self._first_time: float | None = None
        self._pace_points: deque[float] = deque(maxlen=PACE_POINTS)
        self._last_progress: ProgressReading | None = None
        self._view: MonitorView | None = None

    @property
    def view(self) -> MonitorView | None:
        """The latest view; None before the first frame."""
        return self._view

    def ingest(self, frame: Frame) -> MonitorView:
        self.history.append(frame)
        collect_now_and_then()
        if self._first_time is None:
            self._first_time = frame.time
        self._record(frame)
        frames = tuple(self.history)
        # A job is diagnosed rank by rank, and its verdict replaces the tree's: the tree's root is the launcher,
        # which is never the bottleneck, so diagnosing it as well would only cost a diagnose() more per frame.
        self._seen_running = self._seen_running.after(frames)
        self._job = diagnose_job(frames, self._job, self.hang_after_s, self._seen_running) \
            if frame.job is not None else None
        if self._job is not None:
            self._verdict = self._job.verdict
        else:
            self._verdict = diagnose(frames, self._verdict, self.hang_after_s)
        pair = (self._verdict.bottleneck, self._verdict.liveness)
        if not self._timeline or (self._timeline[-1].bottleneck, self._timeline[-1].liveness) != pair:
            since = self._verdict.since if self._verdict.since is not None else frame.time
            self._timeline.append(VerdictChange(since, *pair))
            del self._timeline[:-TIMELINE_LIMIT]
        pace = self._pace(frame)
        shares = time_shares(frames)
        shown = shown_verdict(self._verdict, pace, shares, memory_risk(frames), gpu_faults(frames),
                              nccl_lines(frames), gpu_memory_risk(frames))
        self._view = MonitorView(frames=frames, verdict=shown, timeline=tuple(self._timeline),
                                 first_time=self._first_time, replay=self.replay, pace=pace, job=self._job,
                                 shares=shares, cannot_see=blind_spots(frame, self.startup_checks),
                                 seen_running=self._seen_running)
        return self._view

    def settle(self, now: float) -> MonitorView | None:
        """None: each frame is folded as it comes, so nothing waits (MonitorProtocol)."""
        return None

    def snapshot(self, partial: str | None = None) -> dict[str, Any]:
        """The snapshot document (gputop.snapshot/2) of everything folded so far; needs one frame. `partial` says
        why the run stopped before the duration asked (the document's "partial" and "partial_reason")."""
        if self._view is None:
            raise ValueError("a snapshot needs at least one frame")
        return build_snapshot(self._view.frames, self._view.verdict, self.comparison, pace=self._view.pace,
                              job=self._view.job, shares=self._view.shares, cannot_see=self._view.cannot_see,
                              partial=partial)

    def close(self) -> None:
        if self.recorder is not None:
            recorder, self.recorder = self.recorder, None
            recorder.close()

    # --- inside ----------------------------------------------------------------------------------------

    def _record(self, frame: Frame) -> None:
        if self.recorder is None:
            return
        if not self.recorder.append(frame):  # a full disk, a removed file: say so once, keep monitoring
            self.record_problem = self.recorder.problem
            self.close()

    def _pace(self, frame: Frame) -> Pace:
        progress = frame.progress
        if progress is None or progress.source is None:
            reason = progress.no_pace if progress is not None else None
            return Pace(hint=reason or (NO_LOG_IN_RECORDING if self.replay else NO_LOG_HINT))
        if progress.seconds_per_iter and _new_reading(progress, self._last_progress):
            self._pace_points.append(progress.seconds_per_iter)
        self._last_progress = progress
        gpu_name = target_gpu_name(frame)
        comparison = compare_progress(progress, self.comparison, gpu_name)
        return Pace(
            iteration=progress.iteration,
            seconds_per_iter=progress.seconds_per_iter,
            recent_seconds_per_iter=tuple(self._pace_points),
            tokens_per_s=comparison.observed_tokens_per_s if comparison is not None and
            comparison.observed_tokens_per_s is not None else progress.tokens_per_s,
            reported_mfu_pct=progress.reported_mfu_pct,
            reported_tflops_per_gpu=progress.reported_tflops_per_gpu,
            comparison=comparison,
            gpu_name=gpu_name or (comparison.reference_device if comparison is not None else None),
            source=progress.source,
            format=progress.format,
            log_of=progress.log_of,
            derived_from=progress.derived_from,
            printed_seconds_per_iter=progress.printed_seconds_per_iter,
            printed_from=progress.printed_from,
        )


def fold(frames: Iterable[Frame], *, hang_after_s: float = DEFAULT_HANG_AFTER_S,
         comparison: ComparisonInputs | None = None, replay: bool = True) -> Monitor:
    """A Monitor that has folded `frames` (a recording), in order."""
    monitor = Monitor(hang_after_s=hang_after_s, comparison=comparison, replay=replay)
    for frame in frames:
        monitor.ingest(frame)
    return monitor


def _new_reading(now: ProgressReading, before: ProgressReading | None) -> bool:
    if before is None:
        return True
    return (now.iteration, now.last_update) != (before.iteration, before.last_update)
