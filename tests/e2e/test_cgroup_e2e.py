"""The cgroup CPU probe: against real cgroups made on this machine (a quota, and a quota on an ancestor),
and against fixture trees (tests/fixtures/cgroup: pure v2, hybrid, v1) with files rewritten between reads."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from probes.sensors.cgroup import CgroupCpuProbe, parse_mountinfo

FIXTURES = Path(__file__).parents[1] / "fixtures" / "cgroup"
AFFINITY = len(os.sched_getaffinity(0))


V2_MOUNTINFO = "30 23 0:26 / /sys/fs/cgroup rw,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"


# --- real cgroups on this machine ------------------------------------------------------------------------


class RealCgroups:
    """Child cgroups under this machine's cpu controller, made for one test and removed after it."""

    def __init__(self) -> None:
        with open("/proc/self/mountinfo") as f:
            mounts = parse_mountinfo(f.read())
        v1 = {
            c: point
            for root, point, fstype, opts in mounts
            if fstype == "cgroup" and root == "/"
            for c in opts.split(",")
        }
        v2 = [point for root, point, fstype, _ in mounts if fstype == "cgroup2" and root == "/"]
        self.created: list[Path] = []
        if "cpu" in v1:
            self.version, self.cpu_root = "v1", Path(v1["cpu"])
            self.cpuacct_root = Path(v1["cpuacct"]) if "cpuacct" in v1 else None
        elif v2 and "cpu" in Path(v2[0], "cgroup.subtree_control").read_text().split():
            self.version, self.cpu_root, self.cpuacct_root = "v2", Path(v2[0]), None
        else:
            pytest.skip(
                "no cpu controller to make child cgroups in (neither v1 cpu nor v2 with +cpu at the root)"
            )
        self.prefix = f"gputop-test-{os.getpid()}"

    def make(self, relative: str, quota_us: int | None = None, with_cpuacct: bool = False) -> Path:
        parts = [self.prefix, *relative.split("/")]
        roots = [self.cpu_root]
        if with_cpuacct and self.cpuacct_root not in (None, self.cpu_root):
            roots.append(self.cpuacct_root)
        for root in roots:
            path = root
            for part in parts:
                parent, path = path, path / part
                if path.exists():
                    continue
                if self.version == "v2" and parent != root:
                    # A v2 group's children get cpu.max only when it delegates the cpu controller.
                    (parent / "cgroup.subtree_control").write_text("+cpu")
                try:
                    path.mkdir()
                except OSError as error:
                    pytest.skip(f"cpu controller not writable: cannot create {path}: {error.strerror}")
                self.created.append(path)
        directory = self.cpu_root.joinpath(*parts)
        if quota_us is not None:
            if self.version == "v1":
                (directory / "cpu.cfs_period_us").write_text("100000")
                (directory / "cpu.cfs_quota_us").write_text(str(quota_us))
            else:
                (directory / "cpu.max").write_text(f"{quota_us} 100000")
        return directory

    def move(self, pid: int, relative: str, with_cpuacct: bool = False) -> None:
        roots = [self.cpu_root] + ([self.cpuacct_root] if with_cpuacct and self.cpuacct_root else [])
        for root in dict.fromkeys(roots):
            (root / self.prefix / relative / "cgroup.procs").write_text(str(pid))

    def remove_all(self) -> None:
        for path in sorted(self.created, key=lambda p: len(p.parts), reverse=True):
            root = next(r for r in (self.cpu_root, self.cpuacct_root) if r and r in path.parents)
            for pid in (path / "cgroup.procs").read_text().split():
                try:
                    (root / "cgroup.procs").write_text(pid)
                except OSError:
                    pass  # it exited meanwhile
            for _ in range(50):  # a process that just died can hold the group for a moment
                try:
                    path.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)


@pytest.fixture
def real_cgroups():
    if os.geteuid() != 0:
        pytest.skip("making cgroups needs root")
    cgroups = RealCgroups()
    try:
        yield cgroups
    finally:
        cgroups.remove_all()


def _tree_cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def _second_read(probe: CgroupCpuProbe, pid: int, tree_cpu: bool, seconds: float = 1.5):
    """The reading 1.5 s after a first one; without tree_cpu only the cgroup's own counter can give usage."""
    probe.read(tree_cpu_seconds=_tree_cpu_seconds(pid) if tree_cpu else None)
    time.sleep(seconds)
    return probe.read(tree_cpu_seconds=_tree_cpu_seconds(pid) if tree_cpu else None)


def _throttled_window(probe: CgroupCpuProbe, pid: int, tree_cpu: bool, throttled, timeout: float = 45.0):
    """1.5 s readings until one shows the target held back by its quota (`throttled(reading)`); the last one.

    How much a spinning target is throttled depends on how much CPU it gets at all: on a crowded machine it
    may not reach its quota in some periods. Waiting for a window where it does is waiting for a state."""
    deadline = time.monotonic() + timeout
    while True:
        reading = _second_read(probe, pid, tree_cpu)
        if throttled(reading) or time.monotonic() > deadline:
            return reading


@pytest.mark.slow
def test_real_quota_throttles_a_busy_target(real_cgroups, spawn_target):
    target = spawn_target("loop_threads.py", "--threads", "0", "--seconds", "90")
    group = real_cgroups.make("limited", quota_us=20000, with_cpuacct=True)
    real_cgroups.move(target.pid, "limited", with_cpuacct=True)

    # The target is in a cpuacct (or v2) group of its own, so usage must come from the cgroup's counter.
    reading = _throttled_window(CgroupCpuProbe(target.pid), target.pid, tree_cpu=False, throttled=lambda r: (
        r.throttled_fraction or 0) > 0.5 and (r.throttled_seconds_per_s or 0) > 0.1)
    assert reading.cgroup_version == real_cgroups.version
    assert reading.cgroup_path == f"/{real_cgroups.prefix}/limited"
    assert reading.quota_cpus == 0.2 and reading.quota_source == str(group) and reading.period_us == 100000
    assert reading.effective_cpus == 0.2
    assert reading.throttled_fraction > 0.5, reading
    assert reading.throttled_seconds_per_s > 0.1, reading
    assert 0.0 < reading.usage_cpus <= 0.23, reading  # never above its quota (a crowded machine gives it less)


@pytest.mark.slow
def test_real_quota_on_an_ancestor_binds(real_cgroups, spawn_target):
    target = spawn_target("loop_threads.py", "--threads", "0", "--seconds", "90")
    parent = real_cgroups.make("outer", quota_us=30000)
    real_cgroups.make("outer/inner")
    real_cgroups.move(target.pid, "outer/inner")

    reading = _throttled_window(CgroupCpuProbe(target.pid), target.pid, tree_cpu=True,
                                throttled=lambda r: (r.throttled_fraction or 0) > 0.5)
    assert reading.cgroup_path == f"/{real_cgroups.prefix}/outer/inner"
    assert reading.quota_cpus == 0.3 and reading.quota_source == str(parent)
    assert reading.throttled_fraction > 0.5, "throttling is read where the binding limit sits"
    assert 0.0 < reading.usage_cpus <= 0.33, reading
