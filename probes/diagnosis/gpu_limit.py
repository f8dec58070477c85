"""What limits the step inside the GPU, in words a person can act on, from the target's GPUs over the metric window
(GpuSummary: NVML's clocks, power and utilisation, and on Hopper and newer its GPM counters) and how busy the main
thread is: tensor-core-bound (the good case), memory-bound, launch-bound, fp32 math the tensor cores would run,
busy outside the tensor cores, or no single limit; and, apart from that, whether a power cap, heat or the board holds
the SM clock below its maximum.

Pure: it reads what the Evidence already holds and returns a frozen GpuLimit, each figure with its value and where it
was read, so a rule's evidence line (probes/diagnosis/rules/gpu.py) and a later rule choosing levers read the same
facts. A GPU without GPM gets no guessed class: it says what NVML cannot see there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.gpu_summary import GpuSummary
from probes.diagnosis.stacks import WAIT

GpuLimitKind = Literal[
    "tensor_core_bound", "memory_bound", "launch_bound", "fp32_math", "busy_outside_tensor_cores", "unclear",
    "unknown",
]

# --- thresholds, each with why it sits where it does -----------------------------------------------------------
# Tensor pipes active at least half the time: the matmuls hold the GPU. The real H200 runs (tests/fixtures/h200)
# place it: GPT-2 XL at its compiled reference rate (53% MFU) shows tensor active 62-65%; seed004 A, a model too
# narrow for the tensor cores (n_embd 384, 30% MFU), 26-32%.
TENSOR_BOUND_PCT: Final = 50.0
# Below this the tensor pipes are idle for practical purposes: every bf16 run recorded keeps them at 26% or more
# (seed004 A's lowest tick), so a step under 10% does almost none of its math on them.
TENSOR_IDLE_PCT: Final = 10.0
# Non-tensor FP32 math this share of the time while the tensor pipes idle: matmuls in fp32 on the CUDA cores. An
# estimate until the prepared GPU check's eager fp32 case measures it: an fp32 matmul (without TF32) keeps the FP32
# pipe busy most of its time, while elementwise kernels, bound by memory, leave it mostly idle.
FP32_BUSY_PCT: Final = 40.0
# DRAM bandwidth at this share of its theoretical peak (which no kernel reaches) is a step that waits on memory.
# The H200 runs that are not memory-bound use 27-33% (GPT-2 XL) and 37-42% (seed004 A).
MEMORY_BOUND_DRAM_PCT: Final = 60.0
# SMs active at least half the time: busy. The gpu rule's GPU_BUSY_SM_ACTIVE_PCT (rules/gpu.py), below which it
# does not call the GPU the limit.
SM_BUSY_PCT: Final = 50.0
# Launch-bound, with the thresholds the cpu_bound rule uses too (rules/cpu_bound.py and rules/signs.py read them
# from here): a kernel runs most of the time (util) while few SMs work, and the main thread, which launches
# the kernels, is on a CPU most of the time rather than waiting for the GPU.
LAUNCH_UTIL_PCT: Final = 60.0
LAUNCH_SM_ACTIVE_PCT: Final = 35.0
LAUNCH_MAIN_RUNNING_PCT: Final = 80.0
# The SM clock below this share of its maximum, with NVML naming why, is held there (the gpu rule's throttled case).
CLOCK_HELD_FRACTION: Final = 0.9
# The clock event reasons that hold the clock down, in words (NVML's others, idle and application clocks, do not).
THROTTLE_REASONS: Final[dict[str, str]] = {
    "sw_power_cap": "software power cap",
    "hw_slowdown": "hardware slowdown",
    "hw_power_brake_slowdown": "hardware power brake",
    "sw_thermal_slowdown": "software thermal slowdown",
    "hw_thermal_slowdown": "hardware thermal slowdown",
    "board_limit": "board limit",
    "reliability": "reliability limit",
}
_POWER_REASONS = ("sw_power_cap", "hw_power_brake_slowdown")
_THERMAL_REASONS = ("sw_thermal_slowdown", "hw_thermal_slowdown")

NO_GPM: Final = "this GPU gives no GPM: SM and tensor activity unknown; 'util' only says a kernel was running"

# Every figure a class rests on today is a share (of time, of the SMs, of a peak); a rate would add its unit here.
FigureUnit = Literal["%"]
_GPM: Final = "NVML GPM, mean over the metric window"
_NVML: Final = "NVML, mean over the metric window"


@dataclass(frozen=True)
class Figure:
    """One number a class rests on, with where it was read."""

    name: str  # as the line says it: "tensor active"
    value: float
    unit: FigureUnit
    source: str

    def words(self) -> str:
        return f"{self.name} {self.value:.0f}{self.unit}"


@dataclass(frozen=True)
class GpuCap:
    """The SM clock held below its maximum, and by what (NVML's clock event reasons)."""

    reasons: tuple[str, ...]  # e.g. ("sw_power_cap",): only those of THROTTLE_REASONS
    clock_fraction: float  # SM clock over its maximum, means over the metric window

    @property
    def power(self) -> bool:
        return any(r in _POWER_REASONS for r in self.reasons)

    @property
    def thermal(self) -> bool:
        return any(r in _THERMAL_REASONS for r in self.reasons)

    def kind_words(self) -> str:
        """"power-capped", "thermal-capped", both, or "clock held" (by the board or a hardware slowdown)."""
        kinds = [kind for kind, held in (("power-capped", self.power), ("thermal-capped", self.thermal)) if held]
        return " and ".join(kinds) or "clock held"

    def words(self) -> str:
        """"power-capped: SM clock at 84% of max (software power cap)"."""
        names = ", ".join(THROTTLE_REASONS[r] for r in self.reasons)
        return f"{self.kind_words()}: SM clock at {100 * self.clock_fraction:.0f}% of max ({names})"


# How each class reads on a line, and what its figures mean (None: the figures say it).
_WORDS: dict[GpuLimitKind, str] = {
    "tensor_core_bound": "tensor-core-bound",
    "memory_bound": "memory-bound",
    "launch_bound": "launch-bound",
    "fp32_math": "fp32 math on the CUDA cores",
    "busy_outside_tensor_cores": "busy outside the tensor cores",
    "unclear": "no single limit",
    "unknown": "not seen",
}
_MEANING: dict[GpuLimitKind, str | None] = {
    "tensor_core_bound": "the matmuls keep the tensor cores busy (the good case)",
    "memory_bound": "its kernels wait on memory (elementwise, norms), not on math",
    "launch_bound": "a kernel runs most of the time but few SMs work, and the main thread is busy launching them",
    "fp32_math": "the math runs in fp32 while the tensor cores (bf16, TF32) go unused",
    "busy_outside_tensor_cores": ("the tensor cores work only part of the SMs' active time and DRAM is not "
                                  "saturated; the rest is non-matmul work or matmuls too narrow to fill the tensor "
                                  "cores"),
    "unclear": None,
    "unknown": None,
}


@dataclass(frozen=True)
class GpuLimit:
    """What limits the step inside the GPU: the class, the figures that made it, a clock cap apart from it, and
    what NVML could not read here that the classes need."""

    kind: GpuLimitKind
    figures: tuple[Figure, ...]
    cap: GpuCap | None = None
    cannot_see: str | None = None

    def words(self) -> str:
        return _WORDS[self.kind]

    def figure(self, name: str) -> Figure | None:
        return next((f for f in self.figures if f.name == name), None)

    def line(self) -> str:
        """"inside the GPU: tensor-core-bound and power-capped — tensor active 64%, SM active 95%, DRAM bandwidth
        29%: ..." (the cap's own figures are the gpu rule's line of the clock held)."""
        said = f"inside the GPU: {self.words()}"
        if self.cap is not None:
            said += f" and {self.cap.kind_words()}"
        if self.figures:
            said += " — " + ", ".join(f.words() for f in self.figures)
        meaning = _MEANING[self.kind]
        if self.kind == "busy_outside_tensor_cores":
            tensor, sm = self.figure("tensor active"), self.figure("SM active")
            if meaning is not None and tensor is not None and sm is not None and sm.value > 0:
                meaning = meaning.replace("only part of", f"in {100 * tensor.value / sm.value:.0f}% of")
        if meaning:
            said += f": {meaning}"
        if self.cannot_see:
            said += f"{'; ' if self.figures else ' — '}{self.cannot_see}"
        return said


@dataclass(frozen=True)
class MainThreadBusy:
    """How much the main thread ran over the metric window, as a share of wall time, and where that was read."""

    running_pct: float
    source: str


def main_thread_busy(ev: Evidence) -> MainThreadBusy | None:
    """The main thread's running share: its own schedstat where readable, else its process's CPU."""
    if ev.main_thread_cpu_pct is not None:
        return MainThreadBusy(ev.main_thread_cpu_pct, "the main thread's schedstat")
    if ev.main_cpu_pct is not None:
        return MainThreadBusy(ev.main_cpu_pct, "the main process's CPU")
    return None


def gpu_limit(ev: Evidence) -> GpuLimit | None:
    """classify() on what the Evidence holds."""
    waiting = ev.main.share(WAIT) if ev.main.samples else None
    return classify(ev.gpu, main_thread_busy(ev), waiting)


def classify(gpu: GpuSummary, main: MainThreadBusy | None = None,
             main_waiting_share: float | None = None) -> GpuLimit | None:
    """The class of what limits the step inside the target's GPUs; None where the target uses none or NVML read
    no utilisation. `main_waiting_share`: py-spy's share of the main thread's samples waiting (idle)."""
    if not gpu.in_use or gpu.util_pct is None:
        return None
    cap = clock_cap(gpu)

    def pct(name: str, value: float | None, source: str = _GPM) -> Figure | None:
        return None if value is None else Figure(name, value, "%", source)

    util = pct("util", gpu.util_pct, _NVML)
    sm = pct("SM active", gpu.sm_active_pct)
    tensor = pct("tensor active", gpu.tensor_active_pct)
    dram = pct("DRAM bandwidth", gpu.dram_bw_pct)
    fp32 = pct("FP32 pipe", gpu.fp32_active_pct)
    fp16 = pct("FP16 pipe", gpu.fp16_active_pct)

    if sm is None and tensor is None:
        return GpuLimit("unknown", (), cap, NO_GPM)
    # A driver may compute some GPM metrics and not others: the classes needing one it lacks are not tried.
    lacking = [name for name, value in (("SM activity", sm), ("tensor activity", tensor), ("DRAM bandwidth", dram))
               if value is None]
    cannot_see = f"GPM gave no {', '.join(lacking)} here" if lacking else None

    def made(kind: GpuLimitKind, *figures: Figure | None) -> GpuLimit:
        return GpuLimit(kind, tuple(f for f in figures if f is not None), cap, cannot_see)

    running = None if main is None else Figure("main thread running", main.running_pct, "%", main.source)
    if (sm is not None and util is not None and util.value >= LAUNCH_UTIL_PCT and sm.value < LAUNCH_SM_ACTIVE_PCT
            and running is not None and running.value >= LAUNCH_MAIN_RUNNING_PCT
            and (main_waiting_share is None or 100 * main_waiting_share < running.value)):
        return made("launch_bound", util, sm, running)
    if tensor is not None and tensor.value >= TENSOR_BOUND_PCT:
        return made("tensor_core_bound", tensor, sm, dram)
    if fp32 is not None and tensor is not None and fp32.value >= FP32_BUSY_PCT and tensor.value < TENSOR_IDLE_PCT:
        return made("fp32_math", fp32, tensor, sm)
    if dram is not None and dram.value >= MEMORY_BOUND_DRAM_PCT:
        return made("memory_bound", dram, tensor, sm)
    if sm is not None and tensor is not None and sm.value >= SM_BUSY_PCT:
        return made("busy_outside_tensor_cores", sm, tensor, dram, fp32, fp16)
    return made("unclear", util, sm, tensor, dram)


def clock_cap(gpu: GpuSummary) -> GpuCap | None:
    """The SM clock held below CLOCK_HELD_FRACTION of its maximum while NVML names a reason that holds it."""
    held = tuple(r for r in gpu.reasons if r in THROTTLE_REASONS)
    if not held or not gpu.sm_clock_mhz or not gpu.max_sm_clock_mhz:
        return None
    fraction = gpu.sm_clock_mhz / gpu.max_sm_clock_mhz
    return GpuCap(held, fraction) if fraction < CLOCK_HELD_FRACTION else None
