"""Which GPU a process of a job uses (pure): its compute context in NVML first, else, for a rank, its
CUDA_VISIBLE_DEVICES and LOCAL_RANK; for a launched main process, an explicit CUDA_VISIBLE_DEVICES only.

docs/jobs.md ("Which GPU each rank uses") says the rules as users see them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from probes.frame import ROLE_MAIN, ROLE_RANK, GpuReading, ProcessSample


def nvml_gpu_index(pid: int, gpu: GpuReading) -> int | None:
    """The GPU on which NVML lists `pid` (mapped to our PID namespace) as a compute process; where it holds
    contexts on several (a stray one on GPU 0 is common), the one where it uses the most memory."""
    best: tuple[int, int] | None = None  # (memory, -index)
    for device in gpu.devices:
        for process in device.processes:
            if process.local_pid != pid:
                continue
            key = (process.used_memory_bytes or 0, -device.index)
            if best is None or key > best:
                best = key
    return -best[1] if best is not None else None


def _device_for_entry(entry: str, gpu: GpuReading) -> int | None:
    """An entry of CUDA_VISIBLE_DEVICES (an index, or a GPU UUID or unique UUID prefix) as an NVML index."""
    devices = gpu.devices if gpu.available else ()
    if entry.lstrip("-").isdigit():
        index = int(entry)
        if index < 0:
            return None
        if not devices:  # NVML unreadable: the user's own setting is still the best answer
            return index
        return index if any(d.index == index for d in devices) else None
    if entry.upper().startswith("GPU-"):
        matches = [d.index for d in devices if d.uuid and d.uuid.lower().startswith(entry.lower())]
        return matches[0] if len(matches) == 1 else None
    return None  # MIG-... instances and anything else: no single NVML device index


def environment_gpu_index(cuda_visible_devices: str | None, local_rank: int | None, gpu: GpuReading) -> int | None:
    """The GPU a rank's environment points it at: entry LOCAL_RANK of CUDA_VISIBLE_DEVICES, or its only entry
    (launchers that give each rank one device set LOCAL_RANK=0 or leave it); without the variable, device
    LOCAL_RANK when NVML shows it. CUDA numbers devices fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID,
    NVML by PCI bus: on a node of identical GPUs the two agree."""
    if cuda_visible_devices is None:
        if local_rank is None or not gpu.available:
            return None
        return local_rank if any(d.index == local_rank for d in gpu.devices) else None
    entries = [e.strip() for e in cuda_visible_devices.split(",") if e.strip()]
    if not entries:
        return None  # "" hides every GPU
    if len(entries) == 1:
        return _device_for_entry(entries[0], gpu)
    position = local_rank or 0
    return _device_for_entry(entries[position], gpu) if position < len(entries) else None


def gpu_index_for(sample: ProcessSample, gpu: GpuReading) -> int | None:
    """The GPU a process uses: its NVML compute context; else, for a rank, its environment (CUDA_VISIBLE_DEVICES
    and LOCAL_RANK); for a launched main process, an explicit CUDA_VISIBLE_DEVICES only."""
    found = nvml_gpu_index(sample.pid, gpu)
    if found is not None:
        return found
    if sample.role == ROLE_RANK:
        return environment_gpu_index(sample.cuda_visible_devices, sample.local_rank, gpu)
    if sample.role == ROLE_MAIN and sample.cuda_visible_devices is not None:
        return environment_gpu_index(sample.cuda_visible_devices, None, gpu)
    return None


def with_gpu_indices(processes: Sequence[ProcessSample], gpu: GpuReading) -> tuple[ProcessSample, ...]:
    """The samples with gpu_index filled wherever one is known."""
    updated = []
    for sample in processes:
        index = gpu_index_for(sample, gpu)
        updated.append(sample if index == sample.gpu_index else dataclasses.replace(sample, gpu_index=index))
    return tuple(updated)

