"""HostCpuProbe on fixture /proc trees (exact numbers) and on the real /proc (it reads something sane)."""

from __future__ import annotations

import os
from pathlib import Path

from support.processes import wait_for

from probes.sensors.hostcpu import HostCpuProbe

STAT = """cpu  {u} 0 {s} {i} 0 0 0 {st} 0 0
cpu0 {u0} 0 0 {i0} 0 0 0 {st0} 0 0
cpu1 {u1} 0 0 {i1} 0 0 0 0 0 0
intr 1 2 3
procs_running {running}
procs_blocked 0
"""


def write_stat(root: Path, u0: int, i0: int, st0: int, u1: int, i1: int, running: int) -> None:
    (root / "stat").write_text(STAT.format(u=u0 + u1, s=0, i=i0 + i1, st=st0, u0=u0, i0=i0, st0=st0, u1=u1, i1=i1,
                                           running=running))


def test_busy_cpus_steal_and_runnable_from_deltas(tmp_path):
    (tmp_path / "pressure").mkdir()
    (tmp_path / "pressure" / "cpu").write_text("some avg10=12.50 avg60=3.00 avg300=1.00 total=1\n"
                                               "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    clock = iter([100.0, 102.0])
    probe = HostCpuProbe(os.getpid(), proc_root=str(tmp_path), clock=lambda: next(clock))
    write_stat(tmp_path, u0=1000, i0=1000, st0=0, u1=1000, i1=1000, running=3)
    first = probe.read()
    assert first.busy_cpus is None and first.online_cpus == 2 and first.runnable_tasks == 3
    # Two seconds later (200 ticks per CPU at 100 Hz): cpu0 busy 150 and stolen 50, cpu1 busy 50.
    write_stat(tmp_path, u0=1150, i0=1000, st0=50, u1=1050, i1=1150, running=5)
    second = probe.read()
    allowed = len(os.sched_getaffinity(os.getpid()))
    assert second.allowed_cpus == allowed
    if allowed == 2:  # the fixture's two CPUs are the ones this test may run on
        assert second.busy_cpus == 1.0  # 200 of the 400 ticks busy, on 2 CPUs
        assert second.steal_pct == 12.5  # 50 of 400 ticks
    assert second.runnable_tasks == 5 and second.pressure_some_avg10 == 12.5


def test_missing_proc_stat_is_a_reason_not_an_error(tmp_path):
    reading = HostCpuProbe(os.getpid(), proc_root=str(tmp_path)).read()
    assert reading.busy_cpus is None and "cannot read" in reading.reason


def test_real_proc_reads_a_sane_machine():
    probe = HostCpuProbe(os.getpid())
    probe.read()
    # Busy CPUs need a kernel tick between two reads: read until one has passed (a state, not a sleep).
    reading = wait_for(lambda: (r := probe.read()).busy_cpus is not None and r, timeout=10, interval=0.005)
    assert reading.online_cpus >= 1 and 1 <= reading.allowed_cpus <= reading.online_cpus
    assert 0.0 <= reading.busy_cpus <= reading.allowed_cpus + 0.01
