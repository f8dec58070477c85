"""The target's GPUs as the diagnosis reads them: which devices are the target's (NVML's process list, or every busy
one where NVML's PIDs do not map here), their readings over the metric window (GpuSummary), and whether a
process's GPU was busy enough in a frame for its idle samples to be waits on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from probes.diagnosis.windows import mean
from probes.frame import Frame, GpuDevice

# A main thread that py-spy calls idle while its GPU runs kernels at least this share of the tick is waiting for
# the GPU (a CUDA synchronisation: `.item()`, backward's tail, the optimizer), not idle. A sync blocks only while
# a kernel runs, so the GPU is busy at least as long as the thread waits on it: a GPU-bound step keeps util near
# 100% (the H200 runs of tests/fixtures/h200). Below half, more of the tick had no kernel running than had
# one, so most of a long wait cannot have been on the GPU. Half is also where the data rule calls a GPU starved
# (rules/data_bound.py GPU_STARVED_UTIL_PCT): a GPU is either starved or busy enough to be waited on, never both.
GPU_WAIT_UTIL_PCT = 50.0
# A GPU "spins" at this util with fewer SMs active (or less power) than this: kernels waiting, not working.
SPIN_UTIL_PCT = 70.0
SPIN_SM_ACTIVE_PCT = 35.0
SPIN_POWER_FRACTION = 0.35


@dataclass
class GpuSummary:
    """The target's GPUs over the metric window (means), or why there are none."""

    devices: list[GpuDevice] = field(default_factory=list)  # latest reading of each in-target device
    available: bool = False
    reason: str | None = None
    util_pct: float | None = None
    sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    power_max_limit_w: float | None = None  # the board's maximum limit, where read
    sm_active_pct: float | None = None
    tensor_active_pct: float | None = None
    # The GPM metrics what is inside the GPU reads (probes/diagnosis/gpu_limit.py), means like the above; the others
    # of probes/gpu_metrics.py are shown and exported, not weighed.
    dram_bw_pct: float | None = None
    fp16_active_pct: float | None = None
    fp32_active_pct: float | None = None
    reasons: tuple[str, ...] = ()
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    assumed: bool = False  # NVML could not attribute processes; busy GPUs taken to be the target's

    @property
    def in_use(self) -> bool:
        return bool(self.devices)

    def spinning(self) -> bool:
        """Util high but few SMs at work (or, without GPM, little power): kernels that wait, as NCCL's do
        for a peer, rather than compute."""
        if not self.in_use or self.util_pct is None or self.util_pct < SPIN_UTIL_PCT:
            return False
        if self.sm_active_pct is not None:
            return self.sm_active_pct < SPIN_SM_ACTIVE_PCT
        if self.power_w is None or not self.power_limit_w:
            return False
        return self.power_w / self.power_limit_w < SPIN_POWER_FRACTION

    def label(self) -> str:
        if len(self.devices) == 1:
            return f"GPU {self.devices[0].index}"
        return f"{len(self.devices)} GPUs (mean)"


def gpu_summary(frames: Sequence[Frame]) -> GpuSummary:
    """The target's GPUs over `frames` (the metric window, oldest first, not empty)."""
    latest = frames[-1]
    if not latest.gpu.available:
        return GpuSummary(available=False, reason=latest.gpu.reason)
    per_frame = [target_devices(f) for f in frames]
    devices = per_frame[-1]
    if not devices:
        return GpuSummary(available=True, reason="no GPU is used by the target's processes")
    assumed = unattributed(frames[-1])
    readings = [d for ds in per_frame for d in ds]
    reasons: list[str] = []
    for d in devices:
        for reason in d.clock_event_reasons or ():
            if reason not in reasons:
                reasons.append(reason)
    used = [d.mem_used_bytes for d in devices if d.mem_used_bytes is not None]
    total = [d.mem_total_bytes for d in devices if d.mem_total_bytes is not None]
    return GpuSummary(
        devices=devices,
        available=True,
        util_pct=mean(d.util_gpu_pct for d in readings),
        sm_clock_mhz=mean(d.sm_clock_mhz for d in readings),
        max_sm_clock_mhz=mean(d.max_sm_clock_mhz for d in readings),
        power_w=mean(d.power_w for d in readings),
        power_limit_w=mean(d.power_limit_w for d in readings),
        power_max_limit_w=mean(d.power_max_limit_w for d in readings),
        sm_active_pct=mean(d.gpm_sm_active_pct for d in readings),
        tensor_active_pct=mean(d.gpm_tensor_active_pct for d in readings),
        dram_bw_pct=mean(d.gpm_dram_bw_pct for d in readings),
        fp16_active_pct=mean(d.gpm_fp16_active_pct for d in readings),
        fp32_active_pct=mean(d.gpm_fp32_active_pct for d in readings),
        reasons=tuple(reasons),
        mem_used_bytes=sum(used) if used else None,
        mem_total_bytes=sum(total) if total else None,
        assumed=assumed,
    )


def target_devices(frame: Frame) -> list[GpuDevice]:
    """The GPUs the target uses; see unattributed for when NVML cannot say."""
    if not frame.gpu.available:
        return []
    mine = [d for d in frame.gpu.devices if d.in_target]
    if mine or not unattributed(frame):
        return mine
    return [d for d in frame.gpu.devices if d.processes or (d.util_gpu_pct or 0.0) > 0.0]


def unattributed(frame: Frame) -> bool:
    """NVML names no process that maps to a PID here: inside a container it reports the host's PIDs,
    which this PID namespace cannot see. Busy GPUs are then taken to be the target's (and said so)."""
    devices = frame.gpu.devices
    return bool(devices) and not any(d.in_target for d in devices) and not any(
        p.local_pid is not None or p.in_target for d in devices for p in d.processes)


def target_gpu_util_pct(frames: Sequence[Frame]) -> float | None:
    """The target's GPUs' utilisation over the frames, mean; None where NVML read none of them."""
    return mean(d.util_gpu_pct for f in frames for d in target_devices(f))


def waits_on_busy_gpu(frame: Frame, pid: int) -> bool:
    """In this frame, the GPUs `pid` runs on (NVML's process list; else the target's) ran kernels at least
    GPU_WAIT_UTIL_PCT of the time: its main thread's idle samples are waits for the GPU."""
    devices = target_devices(frame)
    own = [d for d in devices
           if any((p.local_pid if p.local_pid is not None else p.pid) == pid for p in d.processes)]
    util = mean(d.util_gpu_pct for d in own or devices)
    return util is not None and util >= GPU_WAIT_UTIL_PCT
