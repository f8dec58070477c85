"""How the rules write their evidence: percentages, sample counts, rates and CPU amounts, the line saying where
the main thread spends its samples, and the GPU's readings in one line. Shared so that every verdict words the
same figure the same way."""

from __future__ import annotations

import math

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.stacks import Activity, ThreadProfile, format_where


def percent(fraction: float) -> str:
    return f"{100.0 * fraction:.0f}%"


def sample_count(n: int) -> str:
    return f"{n} sample{'s' if n != 1 else ''}"


def byte_rate(bytes_per_s: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if bytes_per_s >= size:
            return f"{bytes_per_s / size:.1f} {unit}/s"
    return f"{bytes_per_s:.0f} B/s"


def cpu_amount(value: float) -> str:
    return f"{value:g} CPU" if value == 1 else f"{value:.3g} CPUs"


def threads_per_rank(cpus: float, ev: Evidence) -> int:
    """The thread pool one process of the job may use on `cpus`: its rank's share of them (the ranks on this node
    share the CPUs), less one core per DataLoader worker of its own, and at least 1. A 2-rank job on 2 cores gets
    1 thread per rank, not 2: the advice is followed per rank."""
    share = cpus / max(1, ev.ranks_on_node)
    return max(1, math.floor(share) - len(ev.worker_cpu))


def cpu_share_words(cpus: float, ev: Evidence) -> str:
    """How `threads_per_rank` was reached, in words: "2 ranks on 2 CPUs, 2 DataLoader workers"."""
    parts = [f"{ev.ranks_on_node} ranks on {cpu_amount(cpus)}"] if ev.ranks_on_node > 1 else [cpu_amount(cpus)]
    if ev.worker_cpu:
        parts.append(f"{len(ev.worker_cpu)} DataLoader worker{'s' if len(ev.worker_cpu) != 1 else ''}"
                     + (" each" if ev.ranks_on_node > 1 else ""))
    return ", ".join(parts)


def hot_spot(profile: ThreadProfile, *activities: Activity) -> str:
    responsible, user_frame, _ = profile.top(*activities)
    return format_where(responsible, user_frame)


def main_share_line(ev: Evidence, share: float, doing: str, *activities: Activity, sep: str = " in") -> str:
    """'main thread: 87% of 40 samples waiting for the next batch in X, called from Y'. When X is not
    nearly all of those samples, 'most often in X (55% of those)'."""
    responsible, user_frame, top_share = ev.main.top(*activities)
    where = format_where(responsible, user_frame)
    counted = f"main thread: {percent(share)} of {sample_count(ev.main.samples)}"
    head = " ".join(part for part in (counted, doing) if part)
    if top_share >= 0.9:
        return f"{head}{sep} {where}"
    return f"{head}, most often in {where} ({percent(top_share)} of those)"


def gpu_line(ev: Evidence) -> str:
    g = ev.gpu
    parts = []
    if g.util_pct is not None:
        parts.append(f"util {g.util_pct:.0f}%")
    if g.sm_clock_mhz is not None:
        top = f"/{g.max_sm_clock_mhz:.0f}" if g.max_sm_clock_mhz else ""
        parts.append(f"SM clock {g.sm_clock_mhz:.0f}{top} MHz")
    if g.power_w is not None:
        top = f"/{g.power_limit_w:.0f}" if g.power_limit_w else ""
        parts.append(f"power {g.power_w:.0f}{top} W")
    if g.sm_active_pct is not None:
        parts.append(f"SM active {g.sm_active_pct:.0f}%")
    if g.tensor_active_pct is not None:
        parts.append(f"tensor active {g.tensor_active_pct:.0f}%")
    assumed = " (NVML's PIDs do not map here, as inside a container: taken to be the target's)" if g.assumed else ""
    return f"{g.label()}{assumed}: " + ", ".join(parts)
