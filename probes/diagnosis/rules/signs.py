"""Readings of the Evidence that more than one rule weighs: the GPU's power against its limit, a producer
working while the main thread waits, a main thread that mostly sleeps, a GPU busy with kernels too small
to occupy its SMs, a GPU busy enough that waiting means waiting for it, and stacks that show torch.compile."""

from __future__ import annotations

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.gpu_limit import LAUNCH_SM_ACTIVE_PCT
from probes.diagnosis.gpu_summary import GPU_WAIT_UTIL_PCT
from probes.diagnosis.stacks import COMPUTE, DATA_PREP, IO

# A GPU at high util with fewer SMs active than this (or, without SM activity, drawing less power than this
# share of its limit) runs small or waiting kernels: launch-bound work, or NCCL kernels waiting on peers.
LAUNCH_BOUND_SM_ACTIVE_PCT = LAUNCH_SM_ACTIVE_PCT  # one threshold for the cpu_bound rule and gpu_limit
LAUNCH_BOUND_POWER_FRACTION = 0.35
# The main thread asleep (neither on a CPU nor queued for one) this share of wall time, in a process using less
# than IDLE_MAX_CPU_PCT of a core, waits more than it works whatever py-spy's samples say (see asleep_pct). A main
# thread that py-spy sees waiting is idle unless IDLE_MAX_CPU_PCT of a core works beside it.
MOSTLY_ASLEEP_PCT = 60.0
IDLE_MAX_CPU_PCT = 30.0


def power_fraction(ev: Evidence) -> float | None:
    g = ev.gpu
    if g.power_w is None or not g.power_limit_w:
        return None
    return g.power_w / g.power_limit_w


def producer_busy(ev: Evidence) -> bool:
    """Something else in the tree works while the main thread waits: a producer thread or process."""
    if ev.others.samples and ev.others.share(COMPUTE, DATA_PREP, IO) >= 0.3:
        return True
    return any(p.pid != ev.main_pid and (p.cpu_pct or 0.0) >= 20.0 for p in ev.latest.processes if p.alive)


def waits_on_gpu(ev: Evidence) -> bool:
    """The target's GPUs ran kernels at least GPU_WAIT_UTIL_PCT of the metric window (see gpu_summary.py): a main
    thread that waits there (idle samples, or asleep by schedstat) waits in a CUDA synchronisation, not idly."""
    g = ev.gpu
    return g.in_use and g.util_pct is not None and g.util_pct >= GPU_WAIT_UTIL_PCT


def uses_torch_compile(ev: Evidence) -> bool:
    """The main thread's stacks show torch.compile: its compiled code running (over the compile look-back), or a
    compile (over the warm-up's). Such a model is never told to compile."""
    return ev.compiled_code_share > 0.0 or ev.compile.began is not None


def works_beside_the_main_thread(ev: Evidence) -> bool:
    """The main process uses IDLE_MAX_CPU_PCT of a core or more outside its main thread: while the main thread
    waits, another thread of it works (a producer, a compute pool), so the waiting is not idleness.

    The main thread's own CPU is taken out where schedstat gives it: a loop that sleeps 70% of each step and
    computes the rest uses ~30% of a core in its main thread alone, and that is the work between its sleeps, not
    work elsewhere (a quiet machine put such a loop at 30-32% and no rule fit). Without schedstat the whole
    process's CPU is all there is to go on."""
    process = ev.main_cpu_pct
    if process is None:
        return False
    own = ev.main_thread_cpu_pct
    beside = process - own if own is not None else process
    return beside >= IDLE_MAX_CPU_PCT


def mostly_asleep(ev: Evidence) -> bool:
    asleep = ev.asleep_pct()
    return asleep is not None and asleep >= MOSTLY_ASLEEP_PCT and (
        ev.main_cpu_pct is None or ev.main_cpu_pct < IDLE_MAX_CPU_PCT)
