"""How busy the machine's CPUs are, whoever uses them: /proc/stat (per-CPU time, steal, runnable tasks) and
/proc/pressure/cpu. This module is the only one that reads them.

A training node has every core busy. When a job is slow because *other* processes share its CPUs, the
verdict must say so with numbers; this reading is what lets it: CPU time spent on the CPUs the target
may run on (its affinity mask), of which the target's own share is subtracted by the diagnosis.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from probes.frame import HostCpuReading
from probes.sensors.textfiles import read_text

# /proc/stat cpuN fields: user nice system idle iowait irq softirq steal guest guest_nice (USER_HZ ticks).
_IDLE, _IOWAIT, _STEAL = 3, 4, 7
_GUEST_FIELDS = (8, 9)  # already counted in user and nice


def _per_cpu_ticks(text: str) -> dict[int, tuple[int, int, int]]:
    """{cpu: (busy ticks, steal ticks, all ticks)} from /proc/stat."""
    out = {}
    for line in text.splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        name, *values = line.split()
        if not name[3:].isdigit():
            continue
        ticks = [int(v) for v in values]
        total = sum(v for i, v in enumerate(ticks) if i not in _GUEST_FIELDS)
        idle = ticks[_IDLE] + (ticks[_IOWAIT] if len(ticks) > _IOWAIT else 0)
        steal = ticks[_STEAL] if len(ticks) > _STEAL else 0
        out[int(name[3:])] = (total - idle - steal, steal, total)
    return out


def _procs_running(text: str) -> int | None:
    for line in text.splitlines():
        if line.startswith("procs_running "):
            return int(line.split()[1])
    return None


def _pressure_some_avg10(text: str | None) -> float | None:
    for line in (text or "").splitlines():
        if line.startswith("some "):
            fields = dict(item.split("=", 1) for item in line.split()[1:] if "=" in item)
            try:
                return float(fields["avg10"])
            except (KeyError, ValueError):
                return None
    return None


class HostCpuProbe:
    """Reads, once per call, how busy the CPUs the target may use are (deltas against the last call)."""

    def __init__(self, pid: int, proc_root: str = "/proc", clock: Callable[[], float] = time.monotonic) -> None:
        self.pid = pid
        self._proc_root = proc_root
        self._clock = clock
        self._previous: tuple[float, dict[int, tuple[int, int, int]]] | None = None

    def read(self) -> HostCpuReading:
        """Never raises: what cannot be read is None, with the reason."""
        try:
            return self._read()
        except (OSError, ValueError, IndexError) as error:
            return HostCpuReading(reason=f"cannot read /proc/stat: {error}")

    def _read(self) -> HostCpuReading:
        stat = read_text(os.path.join(self._proc_root, "stat"))
        if stat is None:
            return HostCpuReading(reason="cannot read /proc/stat")
        now = self._clock()
        ticks = _per_cpu_ticks(stat)
        try:
            allowed = sorted(os.sched_getaffinity(self.pid))
        except OSError:
            allowed = sorted(ticks)  # the target's mask is unreadable (gone, or not ours): the whole machine
        previous = self._previous
        busy = steal = None
        d_total = 0
        if previous is not None and now > previous[0]:
            before = previous[1]
            cpus = [c for c in allowed if c in ticks and c in before]
            d_busy = sum(ticks[c][0] - before[c][0] for c in cpus)
            d_steal = sum(ticks[c][1] - before[c][1] for c in cpus)
            d_total = sum(ticks[c][2] - before[c][2] for c in cpus)
            if d_total > 0:
                # As a share of the ticks those CPUs counted, not of wall time: over a short interval the
                # 10 ms ticks would otherwise add up to more CPUs than there are.
                busy = round(len(cpus) * max(0, d_busy) / d_total, 3)
                steal = round(100.0 * d_steal / d_total, 1)
        if previous is None or d_total > 0:  # no tick since the last read: keep measuring from that one
            self._previous = (now, ticks)
        return HostCpuReading(
            online_cpus=len(ticks),
            allowed_cpus=len(allowed),
            busy_cpus=busy,
            steal_pct=steal,
            runnable_tasks=_procs_running(stat),
            pressure_some_avg10=_pressure_some_avg10(read_text(os.path.join(self._proc_root, "pressure", "cpu"))),
        )
