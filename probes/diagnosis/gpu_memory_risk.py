"""GPU memory as a risk: a process of the job whose GPU memory (NVML's per-process figure) grows steadily, with the time
left until its GPU is full at that rate ("GPU memory: rank 1 (PID 4242) on GPU 1 grows 52.4 MB/s (over the last 90
s); the GPU's 80.0 GB are full in ~7 min at that rate"). A CUDA out-of-memory error ends such a job, often hours in:
a tensor kept across steps (a loss appended without .item(), a cache keyed by batch) grows by the same amount every
step.

The rate is probes/sensors/memory_growth.py's, as for host memory (probes/diagnosis/memory_risk.py): claimed only
where the fit is steady, so PyTorch's caching allocator, which takes memory in blocks at the start and then holds it,
is no growth. The headroom is the GPU's total less what all its processes use now, since any of them fills it.

Pure: frames in, a GpuMemoryRisk out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from probes.diagnosis.memory_risk import HEADLINE_WITHIN_S, byte_words, duration_words
from probes.frame import Frame
from probes.sensors.memory_growth import WINDOW_S, memory_growth


@dataclass(frozen=True)
class GpuMemoryRisk:
    """Whose GPU memory grows, on which GPU, how fast, and when that GPU is full at that rate."""

    who: str  # "PID 4242", "rank 1 (PID 4242)"
    gpu_index: int
    rate_bytes_per_s: float
    window_s: float
    total_bytes: int | None
    seconds_to_full: float | None

    @property
    def imminent(self) -> bool:
        return self.seconds_to_full is not None and self.seconds_to_full <= HEADLINE_WITHIN_S

    def words(self) -> str:
        grow = (f"GPU memory: {self.who} on GPU {self.gpu_index} grows {byte_words(self.rate_bytes_per_s)}/s (over "
                f"the last {self.window_s:.0f} s)")
        if self.total_bytes is None or self.seconds_to_full is None:
            return grow
        return (f"{grow}; the GPU's {byte_words(self.total_bytes)} are full in ~{duration_words(self.seconds_to_full)} "
                "at that rate")


GPU_MEMORY_ADVICE = ("GPU memory will run out (a CUDA out-of-memory error): memory that grows by the same amount "
                     "every step is held across steps, such as a loss or output kept in a list without .item() or "
                     ".detach(); torch.cuda.memory_summary() in the job, or "
                     "torch.cuda.memory._record_memory_history(), shows what holds it.")


def gpu_memory_risk(history: Sequence[Frame]) -> GpuMemoryRisk | None:
    """The job's process whose GPU memory fills its GPU soonest at its steady rate; None where none grows."""
    if not history:
        return None
    newest = history[-1]
    frames = [f for f in history if f.time >= newest.time - WINDOW_S and f.gpu.available]
    series: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for frame in frames:
        for device in frame.gpu.devices:
            for process in device.processes:
                if process.in_target and process.used_memory_bytes is not None:
                    pid = process.local_pid or process.pid
                    series.setdefault((device.index, pid), []).append((frame.time, float(process.used_memory_bytes)))
    devices = {d.index: d for d in newest.gpu.devices} if newest.gpu.available else {}
    found: list[GpuMemoryRisk] = []
    for (index, pid), points in series.items():
        growth = memory_growth(points)
        if not growth.growing or growth.rate_bytes_per_s is None:
            continue
        gpu = devices.get(index)
        total = gpu.mem_total_bytes if gpu is not None else None
        used = gpu.mem_used_bytes if gpu is not None else None
        left = max(0.0, total - used) / growth.rate_bytes_per_s if total is not None and used is not None else None
        found.append(GpuMemoryRisk(_who(newest, pid), index, growth.rate_bytes_per_s, growth.span_s, total, left))
    if not found:
        return None
    return min(found, key=lambda r: (r.seconds_to_full is None, r.seconds_to_full or 0.0, -r.rate_bytes_per_s))


def _who(frame: Frame, pid: int) -> str:
    process = frame.process(pid)
    return f"rank {process.rank} (PID {pid})" if process is not None and process.rank is not None else f"PID {pid}"
