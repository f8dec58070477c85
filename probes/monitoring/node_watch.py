"""The targets one headless gputop watches on this node: one job (--pid, --slurm-job) or every training job here
(--follow), each read by its own Engine once a tick. `gputop serve` folds the frames into monitors for
/metrics; `gputop agent` writes them to stdout for a gputop on another node to merge.

With --follow the set changes by itself: every few seconds the node is searched for new jobs
(probes/jobs/follow.py) and a job that has ended is dropped after its last frame. A job is watched from its
root (the launcher, or the top of the training process), so a job found through two of its processes is
watched once.

GPUs are read once a tick for every target (probes.sensors.nvml.SharedGpuReading), not once per target: on an 8-GPU
node with several jobs, NVML is the costly read. So is the kernel log (probes.sensors.kernel_log.SharedKernelLog):
each job's engine reads its view, and keeps the records of its own processes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from probes.frame import Frame

if TYPE_CHECKING:  # at run time imported where one is made (watch)
    from probes.monitoring.engine import Engine

DEFAULT_FOLLOW_SCAN_S = 2.0  # how often --follow looks for new jobs


@dataclass
class WatchedTarget:
    """One watched target: its engine, and why it is watched (for the log lines)."""

    engine: Engine
    why: str


@dataclass(frozen=True)
class TargetFrame:
    """One target's frame of a tick; `ended` when following let it go with this frame (its last)."""

    root_pid: int
    frame: Frame
    ended: bool = False


def _log_to_stderr(line: str) -> None:
    print(f"gputop: {line}", file=sys.stderr, flush=True)


class NodeWatch:
    """Ticks every watched target once per call; follows jobs as they come and go when asked."""

    def __init__(self, config, *, pid: int | None, follow: bool, scan_interval_s: float = DEFAULT_FOLLOW_SCAN_S,
                 log: Callable[[str], None] = _log_to_stderr, gpu=None) -> None:
        """gpu: the shared GPU reader (probes.sensors.nvml.SharedGpuReading; tests pass one over a fake NVML)."""
        self.config = config
        self.follow = follow
        self._scan_interval_s = scan_interval_s
        self._log = log
        self.watched: dict[int, WatchedTarget] = {}
        self._last_scan: float | None = None
        self._gpu = gpu
        if gpu is None and config.read_gpu:
            from probes.sensors.nvml import SharedGpuReading

            self._gpu = SharedGpuReading()
        # The kernel log is read once a tick too, each job's engine reading its own view (its PIDs' records).
        from probes.sensors.kernel_log import SharedKernelLog

        self._kernel_log = SharedKernelLog()
        if pid is not None:
            self.watch(pid, f"PID {pid}")

    def tick(self) -> list[TargetFrame]:
        """One tick: read the GPUs once, look for new jobs when it is time, read every watched target. A target
        whose reading fails is left out of this tick (and said): the others' frames still come."""
        if self._gpu is not None:
            self._gpu.refresh()
        self._kernel_log.refresh()
        if self.follow and self._scan_due():
            self._scan()
        frames = []
        for root, watched in list(self.watched.items()):
            try:
                frame = watched.engine.tick()
            except Exception as exc:  # a bug in one target's reading must not stop the others
                self._log(f"reading PID {root} failed ({type(exc).__name__}: {exc}); still watching the others")
                continue
            ended = self.follow and not frame.target.alive
            if ended:
                self._log(f"stopped following PID {root} ({watched.why}): it has ended")
                watched.engine.close()
                del self.watched[root]
            frames.append(TargetFrame(root, frame, ended))
        return frames

    def watch(self, pid: int, why: str) -> bool:
        """Watch `pid`'s job; False (and nothing started) when its root is watched already."""
        from probes.jobs.root import resolve_root_safely
        from probes.monitoring.engine import Engine

        # The job's root, as gputop --pid finds it: asked first, so a job watched already costs no Engine.
        root = pid if self.config.process_only else resolve_root_safely(pid).root_pid
        if root in self.watched:
            return False
        engine = Engine(pid, self.config, gpu=self._gpu, kernel_log=self._kernel_log.view())
        root = engine.root_pid
        if root in self.watched:  # the tree changed between the two looks
            engine.close()
            return False
        self.watched[root] = WatchedTarget(engine, why)
        return True

    def drop(self, root: int) -> None:
        """Stop watching one target (its job has ended here) and close its engine."""
        watched = self.watched.pop(root, None)
        if watched is not None:
            watched.engine.close()

    def close(self) -> None:
        for watched in self.watched.values():
            watched.engine.close()
        self.watched.clear()
        self._kernel_log.close()
        if self._gpu is not None:
            self._gpu.close()

    # --- inside ----------------------------------------------------------------------------------------

    def _scan_due(self) -> bool:
        return self._last_scan is None or time.monotonic() - self._last_scan >= self._scan_interval_s

    def _scan(self) -> None:
        from probes.jobs.follow import find_training_jobs

        self._last_scan = time.monotonic()
        for job in find_training_jobs(gpu_pids=self._gpu_pids()):
            if job.root_pid not in self.watched and self.watch(job.root_pid, job.why):
                self._log(f"following PID {job.root_pid} ({job.why})")

    def _gpu_pids(self) -> list[int]:
        """Processes holding a GPU context, in our PID namespace."""
        if self._gpu is None:
            return []
        return [p.local_pid or p.pid for device in self._gpu.latest.devices for p in device.processes]
