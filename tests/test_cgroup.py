"""The cgroup CPU probe: against real cgroups made on this machine (a quota, and a quota on an ancestor),
and against fixture trees (tests/fixtures/cgroup: pure v2, hybrid, v1) with files rewritten between reads."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import psutil
import pytest

from probes.sensors.cgroup import CgroupCpuProbe, parse_mountinfo

FIXTURES = Path(__file__).parent / "fixtures" / "cgroup"
AFFINITY = len(os.sched_getaffinity(0))


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _copy_tree(name: str, tmp_path: Path) -> tuple[Path, Path, int]:
    """(sys_root, proc_root, pid) of a writable copy of a fixture tree, its proc/PID named for this process
    so that the real CPU affinity read of that PID succeeds."""
    root = tmp_path / name
    shutil.copytree(FIXTURES / name, root)
    pid = os.getpid()
    (root / "proc" / "PID").rename(root / "proc" / str(pid))
    return root / "sys", root / "proc", pid


def _write_tree(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


V2_MOUNTINFO = "30 23 0:26 / /sys/fs/cgroup rw,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"


# --- fixture trees -------------------------------------------------------------------------------------


def test_v2_ancestor_minimum_and_deltas(tmp_path):
    sys_root, proc_root, pid = _copy_tree("v2", tmp_path)
    clock = FakeClock(100.0)
    probe = CgroupCpuProbe(pid, str(sys_root), str(proc_root), clock=clock)

    first = probe.read(runnable_threads=3)
    assert first.cgroup_version == "v2"
    assert first.cgroup_path == "/system.slice/train.service/job"
    # job: max, train.service: 4 CPUs, system.slice: 1.5 CPUs -> the slice's limit binds.
    assert first.quota_cpus == 1.5 and first.period_us == 100000
    assert first.quota_source == str(sys_root / "system.slice")
    assert first.affinity_cpus == AFFINITY and first.effective_cpus == min(AFFINITY, 1.5)
    # Throttling is counted where the limit sits.
    assert (first.nr_periods, first.nr_throttled, first.throttled_seconds_total) == (1000, 100, 2.0)
    assert first.pressure_some_avg10 == 12.5, "the job's own cpu.pressure, not the root's (90)"
    assert first.runnable_threads == 3
    assert first.usage_cpus is None and first.throttled_fraction is None, "no rates before a previous read"
    assert first.reason is None

    job, slice_ = sys_root / "system.slice" / "train.service" / "job", sys_root / "system.slice"
    (job / "cpu.stat").write_text("usage_usec 6200000\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n")
    (slice_ / "cpu.stat").write_text(
        "usage_usec 99000000\nnr_periods 1020\nnr_throttled 115\nthrottled_usec 2500000\n"
    )
    (job / "cpu.pressure").write_text("some avg10=20.00 avg60=5.00 avg300=1.00 total=1\n")
    clock.now = 102.0

    second = probe.read()
    assert second.usage_cpus == 0.6  # 1.2 s of the job's CPU over 2 s
    assert second.throttled_fraction == 0.75  # 15 of 20 periods
    assert second.throttled_seconds_per_s == 0.25
    assert (second.nr_periods, second.nr_throttled, second.throttled_seconds_total) == (1020, 115, 2.5)
    assert second.pressure_some_avg10 == 20.0


def test_v2_without_mountinfo_falls_back_to_sys_root(tmp_path):
    sys_root, proc_root, pid = _copy_tree("v2", tmp_path)
    (proc_root / "self" / "mountinfo").unlink()
    reading = CgroupCpuProbe(pid, str(sys_root), str(proc_root)).read()
    assert (
        reading.cgroup_version == "v2" and reading.quota_cpus == 1.5 and reading.pressure_some_avg10 == 12.5
    )


def test_v2_container_root_counts_but_host_root_does_not(tmp_path):
    pid = os.getpid()
    common = {
        "proc/self/mountinfo": V2_MOUNTINFO,
        f"proc/{pid}/cgroup": "0::/\n",
        "sys/cgroup.controllers": "cpu memory\n",
        "sys/cpu.stat": "usage_usec 1000000\n",
    }
    # Inside a cgroup namespace the visible root is the container's group: it has a cpu.max.
    container, host = tmp_path / "container", tmp_path / "host"
    _write_tree(container, {**common, "sys/cpu.max": "200000 100000\n"})
    _write_tree(host, common)
    clock = FakeClock()
    in_container = CgroupCpuProbe(pid, str(container / "sys"), str(container / "proc"), clock=clock)
    on_host = CgroupCpuProbe(pid, str(host / "sys"), str(host / "proc"), clock=clock)
    in_container.read(tree_cpu_seconds=10.0)
    on_host.read(tree_cpu_seconds=10.0)
    for root in (container, host):
        (root / "sys" / "cpu.stat").write_text("usage_usec 2500000\n")
    clock.now += 1.0

    inside = in_container.read(tree_cpu_seconds=10.25)
    assert (
        inside.cgroup_path == "/"
        and inside.quota_cpus == 2.0
        and inside.quota_source == str(container / "sys")
    )
    assert inside.usage_cpus == 1.5, "the container's own counter"
    host_reading = on_host.read(tree_cpu_seconds=10.25)
    assert host_reading.quota_cpus is None and host_reading.quota_source is None
    assert host_reading.usage_cpus == 0.25, "the host's root counts the whole machine: use the tree instead"


def test_hybrid_v1_cpu_with_cgroup2_pressure(tmp_path):
    sys_root, proc_root, pid = _copy_tree("hybrid", tmp_path)
    clock = FakeClock()
    probe = CgroupCpuProbe(pid, str(sys_root), str(proc_root), clock=clock)

    first = probe.read(tree_cpu_seconds=1.0)
    assert first.cgroup_version == "v1" and first.cgroup_path == "/batch/job"
    assert first.quota_cpus == 1.0 and first.quota_source == str(sys_root / "cpu" / "batch")
    assert first.period_us == 100000
    assert (first.nr_periods, first.nr_throttled, first.throttled_seconds_total) == (500, 50, 3.0)
    assert first.pressure_some_avg10 == 4.25, "cpu.pressure from the cgroup2 (unified) hierarchy"
    assert first.reason is None

    (sys_root / "cpuacct" / "batch" / "job" / "cpuacct.usage").write_text("8500000000\n")
    (sys_root / "cpu" / "batch" / "cpu.stat").write_text(
        "nr_periods 520\nnr_throttled 60\nthrottled_time 3400000000\nnr_bursts 0\nburst_time 0\n"
    )
    clock.now += 2.0
    second = probe.read(tree_cpu_seconds=99.0)
    assert second.usage_cpus == 0.75, "cpuacct.usage of the same group, not the tree"
    assert second.throttled_fraction == 0.5 and second.throttled_seconds_per_s == 0.2


def test_hybrid_cpuacct_in_another_group_uses_tree_cpu(tmp_path):
    sys_root, proc_root, pid = _copy_tree("hybrid", tmp_path)
    cgroup_file = proc_root / str(pid) / "cgroup"
    cgroup_file.write_text(cgroup_file.read_text().replace("2:cpuacct:/batch/job", "2:cpuacct:/"))
    clock = FakeClock()
    probe = CgroupCpuProbe(pid, str(sys_root), str(proc_root), clock=clock)
    probe.read(tree_cpu_seconds=10.0)
    clock.now += 2.0
    reading = probe.read(tree_cpu_seconds=11.0)
    assert reading.quota_cpus == 1.0 and reading.usage_cpus == 0.5
    clock.now += 1.0
    assert probe.read(tree_cpu_seconds=None).usage_cpus is None
    assert "no CPU usage counter" in probe.read(tree_cpu_seconds=None).reason


def test_v1_comounted_cpu_cpuacct(tmp_path):
    sys_root, proc_root, pid = _copy_tree("v1", tmp_path)
    clock = FakeClock()
    probe = CgroupCpuProbe(pid, str(sys_root), str(proc_root), clock=clock)
    group = sys_root / "cpu,cpuacct" / "docker" / "abc123"

    first = probe.read()
    assert first.cgroup_version == "v1" and first.cgroup_path == "/docker/abc123"
    assert first.quota_cpus == 0.5 and first.quota_source == str(group)
    assert first.effective_cpus == 0.5
    assert first.throttled_seconds_total == 1.0  # throttled_time is in ns
    assert first.pressure_some_avg10 is None and "cpu.pressure" in first.reason

    (group / "cpuacct.usage").write_text("41000000000\n")
    (group / "cpu.stat").write_text("nr_periods 220\nnr_throttled 30\nthrottled_time 1500000000\n")
    clock.now += 2.0
    second = probe.read()
    assert second.usage_cpus == 0.5 and second.throttled_fraction == 0.5
    assert second.throttled_seconds_per_s == 0.25

    # A counter that goes backwards (the group was recreated) gives no rate rather than a negative one.
    (group / "cpuacct.usage").write_text("1000\n")
    clock.now += 1.0
    assert probe.read().usage_cpus is None


def test_v1_container_view_mounts_its_own_group_at_the_root(tmp_path):
    pid = os.getpid()
    mountinfo = (
        "30 25 0:26 /docker/abc123 /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct\n"
    )
    _write_tree(
        tmp_path,
        {
            "proc/self/mountinfo": mountinfo,
            f"proc/{pid}/cgroup": "4:cpu,cpuacct:/docker/abc123\n",
            "sys/cpu,cpuacct/cpu.cfs_quota_us": "250000\n",
            "sys/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            "sys/cpu,cpuacct/cpu.stat": "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n",
            "sys/cpu,cpuacct/cpuacct.usage": "5\n",
        },
    )
    reading = CgroupCpuProbe(pid, str(tmp_path / "sys"), str(tmp_path / "proc")).read()
    assert reading.cgroup_path == "/" and reading.quota_cpus == 2.5
    assert reading.quota_source == str(tmp_path / "sys" / "cpu,cpuacct")
    assert reading.effective_cpus == min(AFFINITY, 2.5)


def test_unreadable_files_give_none_and_a_reason(tmp_path):
    sys_root, proc_root, pid = _copy_tree("v2", tmp_path)
    (sys_root / "system.slice" / "cpu.max").write_text("garbage\n")
    reading = CgroupCpuProbe(pid, str(sys_root), str(proc_root)).read()
    assert reading.quota_cpus == 4.0, "the next ancestor still counts"
    assert "cannot parse" in reading.reason

    missing = CgroupCpuProbe(2**22 + 7, str(sys_root), str(proc_root)).read(runnable_threads=2)
    assert missing.cgroup_version is None and missing.quota_cpus is None and missing.affinity_cpus is None
    assert missing.runnable_threads == 2
    assert "cannot read" in missing.reason and "affinity" in missing.reason


def test_target_gone_keeps_reading_its_last_cgroup(tmp_path):
    sys_root, proc_root, pid = _copy_tree("v1", tmp_path)
    probe = CgroupCpuProbe(pid, str(sys_root), str(proc_root))
    probe.read()
    (proc_root / str(pid) / "cgroup").unlink()
    reading = probe.read()
    assert reading.quota_cpus == 0.5 and "target gone" in reading.reason


def test_parse_mountinfo_unescapes_and_keeps_only_cgroups():
    text = (
        "22 28 0:21 / /proc rw - proc proc rw\n"
        "41 31 0:38 / /sys/fs/cgroup/my\\040dir rw shared:9 master:3 - cgroup2 cgroup2 rw\n"
        "32 31 0:29 /kube /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    )
    assert parse_mountinfo(text) == [
        ("/", "/sys/fs/cgroup/my dir", "cgroup2", "rw"),
        ("/kube", "/sys/fs/cgroup/cpu,cpuacct", "cgroup", "rw,cpu,cpuacct"),
    ]


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
