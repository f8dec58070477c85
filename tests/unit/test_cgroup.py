"""The cgroup CPU probe: against real cgroups made on this machine (a quota, and a quota on an ancestor),
and against fixture trees (tests/fixtures/cgroup: pure v2, hybrid, v1) with files rewritten between reads."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from probes.sensors.cgroup import CgroupCpuProbe, parse_mountinfo

FIXTURES = Path(__file__).parents[1] / "fixtures" / "cgroup"
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
