"""One rank of a job seen as a lone process: project_rank() cuts a frame down to that rank and the processes working
for it, with its own GPU marked as the target's and the rest of the job taken out of the host's busy CPUs (other
work is work outside the job), so that diagnose() judges each rank as it judges a lone process.
RankHistory is a history seen through that projection, projected lazily and once per frame: projections are
memoised by the frame's identity and dropped with it.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import overload

from probes.diagnosis.frame_stacks import CACHED_RANKS
from probes.diagnosis.frame_stacks import reserve_cached_ranks as reserve_frame_stacks_cache
from probes.diagnosis.windows import MAX_LOOKBACK_FRAMES
from probes.frame import (
    ROLE_MAIN,
    ROLE_RANK,
    Frame,
    GpuReading,
    HostCpuReading,
    ProcessSample,
    StacksReading,
    TargetInfo,
)
from probes.recent import recent_frames


def project_rank(frame: Frame, pid: int) -> Frame:
    """The frame as a lone-process frame for one rank: target = that rank (alive from its sample), processes =
    it (role main) and the processes working for it (owner_pid; workers keep their roles), stacks of those
    processes only, its own GPU marked as the target's, the host's busy CPUs less what the rest of the job used
    (_host_outside_the_job); the cgroup, progress and the rest as they are."""
    sample = frame.process(pid)
    members = {pid} | {p.pid for p in frame.processes if p.owner_pid == pid}
    processes = [dataclasses.replace(sample, role=ROLE_MAIN)] if sample is not None else []
    processes += [p for p in frame.processes if p.pid in members and p.pid != pid]
    alive = sample is not None and sample.alive and sample.state != "zombie"
    root = frame.target
    target = TargetInfo(
        pid=pid, alive=alive, cmdline=sample.cmdline if sample is not None else (), exe=root.exe,
        python_version=root.python_version, exited_at=None if alive else frame.time,
        exit_reason=None if alive else "the rank's process ended", environment=root.environment,
        ranks_on_node=max(1, sum(1 for p in frame.processes if p.role == ROLE_RANK and p.alive)))
    stacks = frame.stacks
    counts = tuple(c for c in stacks.counts if c.pid in members)
    stacks = StacksReading(
        available=stacks.available, reason=stacks.reason, sampler=stacks.sampler, rate_hz=stacks.rate_hz,
        achieved_rate_hz=stacks.achieved_rate_hz, samples=sum(c.count for c in counts), native=stacks.native,
        threads=tuple(t for t in stacks.threads if t.pid in members), counts=counts,
        errors=stacks.errors, phase_change=stacks.phase_change, blocked=stacks.blocked,
        windows=tuple(w for w in stacks.windows if w.pid in members))
    return dataclasses.replace(frame, target=target, processes=tuple(processes), stacks=stacks,
                               gpu=_rank_gpu(frame.gpu, sample), host=_host_outside_the_job(frame, members), job=None)


def _host_outside_the_job(frame: Frame, members: set[int]) -> HostCpuReading:
    """The host's reading with the CPU the rest of the job used this tick (its other ranks, their workers, the
    launcher: every live process of the watched tree outside this rank's) taken out of its busy CPUs. What is left
    beyond the rank's own is work outside the job: the rank's other ranks are its job, never other work."""
    host = frame.host
    if host.busy_cpus is None:
        return host
    rest = sum(p.cpu_pct or 0.0 for p in frame.processes
               if p.pid not in members and p.alive and p.state != "zombie") / 100.0
    return dataclasses.replace(host, busy_cpus=max(0.0, host.busy_cpus - rest)) if rest else host


def _rank_gpu(gpu: GpuReading, sample: ProcessSample | None) -> GpuReading:
    """The GPU reading with only the rank's own device marked as the target's (by its gpu_index, else by the
    compute processes NVML lists). Unchanged when neither says which device is the rank's."""
    if not gpu.available or sample is None:
        return gpu
    if sample.gpu_index is not None:
        mine = {sample.gpu_index}
    else:
        mine = {d.index for d in gpu.devices for p in d.processes if sample.pid in (p.local_pid, p.pid)}
    if not mine:
        return gpu
    devices = tuple(dataclasses.replace(d, in_target=d.index in mine) for d in gpu.devices)
    return dataclasses.replace(gpu, devices=devices)


# Projections of the frames the per-rank diagnoses look back over. An entry goes when its source frame does (a
# weakref finalizer), so no projection outlives the History's frames; the bound is a look-back window per rank,
# as for the frame summaries' cache (frame_stacks.py).
_PROJECTION_CACHE_LIMIT = CACHED_RANKS * (MAX_LOOKBACK_FRAMES + 16)
_projections: OrderedDict[tuple[int, int], Frame] = OrderedDict()


def reserve_cached_ranks(ranks: int) -> None:
    """Size the projection cache, and the frame summaries' cache under it, for `ranks` ranks alive at once (a job
    merged across nodes); see probes.diagnosis.frame_stacks.reserve_cached_ranks."""
    global _PROJECTION_CACHE_LIMIT
    _PROJECTION_CACHE_LIMIT = max(CACHED_RANKS, ranks) * (MAX_LOOKBACK_FRAMES + 16)
    reserve_frame_stacks_cache(ranks)


def _projected(frame: Frame, pid: int) -> Frame:
    key = (id(frame), pid)  # unique while the frame lives, and the entry goes when it does
    cached = _projections.get(key)
    if cached is not None:
        return cached
    projection = project_rank(frame, pid)
    weakref.finalize(frame, _projections.pop, key, None)
    while len(_projections) >= _PROJECTION_CACHE_LIMIT:
        _projections.popitem(last=False)
    _projections[key] = projection
    return projection


class RankHistory(Sequence[Frame]):
    """A history seen through project_rank for one rank, projected lazily: diagnose() reads only the recent
    end, so only those frames are projected (each once, then cached)."""

    def __init__(self, history: Sequence[Frame], pid: int) -> None:
        self._history = history
        self._pid = pid
        self._recent: dict[tuple[float | None, int | None], list[Frame]] = {}

    def __len__(self) -> int:
        return len(self._history)

    def recent(self, seconds: float | None, limit: int | None = None) -> list[Frame]:
        """probes.monitoring.history.recent_frames of this view: the window found on the unprojected frames (a
        projection keeps its frame's time) and projected, once per window asked for (diagnose() asks for the same
        few windows several times a tick)."""
        key = (seconds, limit)
        window = self._recent.get(key)
        if window is None:
            window = [_projected(f, self._pid) for f in recent_frames(self._history, seconds, limit)]
            self._recent[key] = window
        return list(window)

    @overload
    def __getitem__(self, index: int) -> Frame: ...

    @overload
    def __getitem__(self, index: slice) -> list[Frame]: ...

    def __getitem__(self, index: int | slice) -> Frame | list[Frame]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return _projected(self._history[index], self._pid)

