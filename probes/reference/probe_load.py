"""What else loads the machine while `gputop probe` times its reference step: the host CPUs (probes/sensors/hostcpu.py,
/proc/stat) and the other compute processes on the GPUs (probes/sensors/nvml.py), read before, during and after the
timed
steps. A probe timed beside other work measured torch 48x slower than on a quiet machine and said nothing; with
this reading its figure says when it is not a clean baseline, on screen and in its JSON.

CPU: on the CPUs the probe may run on (its affinity), the CPUs' worth of time spent by anyone, less the probe's own
(process CPU time over the same wall time). GPU: compute processes NVML lists that are not the probe.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from probes.sensors.hostcpu import HostCpuProbe

LOAD_WINDOW_S = 1.0  # each of the before and after readings: /proc/stat counts in 10 ms ticks
# Others using at least this many CPUs make it a busy machine for a probe on the CPU: torch sizes its thread pool by
# the cores and waits for the slowest thread, so one busy core slows every step. A GPU probe needs the host only to
# launch kernels: there the others must also take this share of the CPUs it may run on.
BUSY_MIN_CPUS = 0.25
BUSY_MIN_SHARE_GPU_PROBE = 0.1


@dataclass(frozen=True)
class ProbeLoad:
    """The other load around the probe's timed steps; `clean` False with `note` saying why and what to do."""

    allowed_cpus: int | None = None  # CPUs the probe may run on
    others_cpus_before: float | None = None  # CPUs' worth used by other processes, LOAD_WINDOW_S before timing
    others_cpus_during: float | None = None  # ... while the steps were timed (the probe's own CPU time removed)
    others_cpus_after: float | None = None  # ... LOAD_WINDOW_S after
    gpu_other_processes: tuple[int, ...] = ()  # PIDs (as NVML reports them) of other compute processes on its GPU
    gpu_reason: str | None = None  # why the GPU's other processes were not read (no NVML, a CPU probe)
    on_cpu: bool = False  # the probe ran on the CPU: every busy core slows it
    clean: bool = True
    note: str | None = None


def busy(others_cpus: float | None, allowed_cpus: int | None, on_cpu: bool) -> bool:
    """Other processes used enough of the probe's CPUs to slow it."""
    if others_cpus is None or others_cpus < BUSY_MIN_CPUS:
        return False
    return on_cpu or others_cpus >= BUSY_MIN_SHARE_GPU_PROBE * (allowed_cpus or 1)


def judge(load: ProbeLoad) -> ProbeLoad:
    """The load with `clean` and `note` set from its readings."""
    figures = (load.others_cpus_before, load.others_cpus_during, load.others_cpus_after)
    cpu_busy = any(busy(value, load.allowed_cpus, load.on_cpu) for value in figures)
    reasons = []
    if cpu_busy:
        of = f" of the {load.allowed_cpus} CPUs it may run on" if load.allowed_cpus else ""
        during = load.others_cpus_during if load.others_cpus_during is not None else max(
            v for v in figures if v is not None)
        around = ", ".join(f"{name} {value:.1f}" for name, value in
                           (("before", load.others_cpus_before), ("after", load.others_cpus_after))
                           if value is not None)
        reasons.append(f"other processes used {during:.1f}{of} while it timed its steps"
                       + (f" ({around})" if around else ""))
    if load.gpu_other_processes:
        pids = ", ".join(str(pid) for pid in load.gpu_other_processes[:4])
        reasons.append(f"other compute processes on its GPU (PID {pids})")
    if not reasons:
        return dataclasses.replace(load, clean=True, note=None)
    note = ("not a clean baseline: " + "; ".join(reasons) + ". Its times are those of a shared machine, slower "
            "than this machine's own: rerun the probe when the other work is gone")
    return dataclasses.replace(load, clean=False, note=note)


class LoadWatch:
    """Reads the other load before, during and after the timed steps; `result()` says whether it was clean.
    Never raises: what cannot be read stays None (the figure is then judged on what was read)."""

    def __init__(self, gpu: bool, pid: int | None = None, sleep: Callable[[float], None] = time.sleep,
                 nvml=None) -> None:
        self._pid = pid or os.getpid()
        self._nvml = nvml  # a pynvml module; None: the real one, through probes/sensors/nvml.py
        self._host = HostCpuProbe(self._pid)
        self._sleep = sleep
        self._gpu = gpu
        self._gpu_others: dict[str | None, set[int]] = {}  # by device UUID (NVML's "GPU-...")
        self.gpu_uuid: str | None = None  # the probe's device, once known: only its other processes count
        self._gpu_reason: str | None = None if gpu else "a CPU probe"
        self.on_cpu = not gpu
        # CPUs' worth other processes used before, during and after the timed steps (ProbeLoad's figures)
        self._before: float | None = None
        self._during: float | None = None
        self._after: float | None = None
        self._allowed: int | None = None
        self._timing: tuple[float, float] | None = None

    def before(self) -> None:
        self._before = self._window()
        self._read_gpu()

    def start_timing(self) -> None:
        self._host.read()  # the start of the timed stretch
        self._timing = (time.monotonic(), time.process_time())

    def stop_timing(self) -> None:
        if self._timing is None:
            return
        self._during = self._others(self._host.read(), *self._timing)

    def after(self) -> None:
        self._after = self._window()
        self._read_gpu()

    def result(self) -> ProbeLoad:
        return judge(ProbeLoad(allowed_cpus=self._allowed, others_cpus_before=self._before,
                               others_cpus_during=self._during, others_cpus_after=self._after,
                               gpu_other_processes=() if self.on_cpu else self._gpu_other_pids(),
                               gpu_reason="a CPU probe" if self.on_cpu else self._gpu_reason, on_cpu=self.on_cpu))

    def _gpu_other_pids(self) -> tuple[int, ...]:
        wanted = [uuid for uuid in self._gpu_others if self.gpu_uuid is None or _same_gpu(uuid, self.gpu_uuid)]
        return tuple(sorted({pid for uuid in wanted for pid in self._gpu_others[uuid]}))

    def _window(self) -> float | None:
        self._host.read()
        start = (time.monotonic(), time.process_time())
        self._sleep(LOAD_WINDOW_S)
        return self._others(self._host.read(), *start)

    def _others(self, reading, wall_start: float, cpu_start: float) -> float | None:
        """CPUs' worth the others used: the CPUs' busy time less the probe's own, over the same wall time."""
        if reading.allowed_cpus is not None:
            self._allowed = reading.allowed_cpus
        wall = time.monotonic() - wall_start
        if reading.busy_cpus is None or wall <= 0:
            return None
        own = (time.process_time() - cpu_start) / wall
        return round(max(0.0, reading.busy_cpus - own), 2)

    def _read_gpu(self) -> None:
        if not self._gpu:
            return
        try:
            from probes.sensors.nvml import NvmlGpuProbe

            probe = NvmlGpuProbe(self._nvml)
            try:
                reading = probe.read({self._pid: self._pid})
            finally:
                probe.close()
        except Exception as exc:  # NVML's failures are the reading's reason, never the probe's crash
            self._gpu_reason = f"NVML: {exc}"
            return
        if not reading.available:
            self._gpu_reason = reading.reason
            return
        for device in reading.devices:
            self._gpu_others.setdefault(device.uuid, set()).update(
                p.pid for p in device.processes if not p.in_target and p.pid != self._pid)


def _same_gpu(nvml_uuid: str | None, torch_uuid: str) -> bool:
    """NVML says "GPU-1a2b...", torch's device properties "1a2b..."."""
    return nvml_uuid is not None and nvml_uuid.lower().removeprefix("gpu-") == torch_uuid.lower().removeprefix("gpu-")
