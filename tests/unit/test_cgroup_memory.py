"""The cgroup memory probe against fixture trees written under tmp_path (v2, v1, hybrid), files rewritten between
reads; and against this process's own memory cgroup. The real limit, growth and OOM kill:
tests/e2e/test_memory_e2e.py."""

from __future__ import annotations

import os
from pathlib import Path

from probes.sensors.cgroup import CgroupMemoryProbe

GIB = 1 << 30
MIB = 1 << 20
V2_MOUNTINFO = "30 23 0:26 / /sys/fs/cgroup rw,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
V1_MOUNTINFO = (
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)
V1_UNLIMITED = "9223372036854771712\n"
HOST_PRESSURE = "some avg10=1.50 avg60=0.00 avg300=0.00 total=10\nfull avg10=0.50 avg60=0.00 avg300=0.00 total=5\n"


def _write_tree(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _events(max_: int = 0, oom_kill: int = 0) -> str:
    return f"low 0\nhigh 0\nmax {max_}\noom {oom_kill}\noom_kill {oom_kill}\noom_group_kill 0\n"


def _v2_tree(tmp_path: Path) -> tuple[Path, Path, int]:
    pid = os.getpid()
    job = "sys/system.slice/train.service/job"
    _write_tree(tmp_path, {
        "proc/self/mountinfo": V2_MOUNTINFO,
        f"proc/{pid}/cgroup": "0::/system.slice/train.service/job\n",
        "proc/vmstat": "nr_free_pages 100\noom_kill 2\n",
        "proc/pressure/memory": HOST_PRESSURE,
        "sys/cgroup.controllers": "cpu memory\n",
        "sys/system.slice/memory.max": "max\n",
        "sys/system.slice/memory.current": f"{5 * GIB}\n",
        "sys/system.slice/memory.events": _events(),
        "sys/system.slice/train.service/memory.max": f"{8 * GIB}\n",
        "sys/system.slice/train.service/memory.swap.max": f"{GIB}\n",
        "sys/system.slice/train.service/memory.current": f"{3 * GIB}\n",
        "sys/system.slice/train.service/memory.events": _events(max_=5),
        f"{job}/memory.max": "max\n",
        f"{job}/memory.swap.max": "max\n",
        f"{job}/memory.current": f"{2 * GIB}\n",
        f"{job}/memory.swap.current": f"{10 * MIB}\n",
        f"{job}/memory.stat": f"anon {GIB}\nfile {512 * MIB}\nkernel 0\n",
        f"{job}/memory.events": _events(),
        f"{job}/memory.pressure": "some avg10=12.50 avg60=1.00 avg300=0.00 total=1\n"
                                  "full avg10=3.25 avg60=0.00 avg300=0.00 total=1\n",
    })
    return tmp_path / "sys", tmp_path / "proc", pid


def test_v2_lowest_limit_events_and_pressure(tmp_path):
    sys_root, proc_root, pid = _v2_tree(tmp_path)
    probe = CgroupMemoryProbe(pid, str(sys_root), str(proc_root))
    service, job = sys_root / "system.slice" / "train.service", sys_root / "system.slice" / "train.service" / "job"

    first = probe.read()
    assert first.cgroup_version == "v2" and first.cgroup_path == "/system.slice/train.service/job"
    assert first.usage_bytes == 2 * GIB and first.file_bytes == 512 * MIB
    # job: max, train.service: 8 GiB, system.slice: max -> the service's limit binds, against its own usage.
    assert first.limit_bytes == 8 * GIB and first.limit_source == str(service)
    assert first.limit_usage_bytes == 3 * GIB
    assert first.swap_usage_bytes == 10 * MIB and first.swap_limit_bytes == GIB
    assert first.oom_kills_total == 0 and first.max_events_total == 5, "limit hits are read where the limit is"
    assert first.host_oom_kills_total == 2
    assert first.oom_kills_new is None and first.max_events_new is None and first.host_oom_kills_new is None
    assert (first.pressure_some_avg10, first.pressure_full_avg10) == (12.5, 3.25)
    assert first.pressure_source == str(job / "memory.pressure"), "the job's own PSI, not the machine's"
    assert first.reason is None

    (job / "memory.events").write_text(_events(oom_kill=1))
    (service / "memory.events").write_text(_events(max_=9))
    second = probe.read()
    assert (second.oom_kills_total, second.oom_kills_new) == (1, 1)
    assert (second.max_events_total, second.max_events_new) == (9, 4)
    assert second.host_oom_kills_new == 0

    # A lower limit set on an ancestor meanwhile binds instead.
    (sys_root / "system.slice" / "memory.max").write_text(f"{6 * GIB}\n")
    third = probe.read()
    assert third.limit_bytes == 6 * GIB and third.limit_source == str(sys_root / "system.slice")
    assert third.limit_usage_bytes == 5 * GIB and third.max_events_total == 0
    assert third.max_events_new is None, "another group's counter: no change claimed across it"


def test_v2_unlimited_and_host_pressure_when_the_group_has_none(tmp_path):
    sys_root, proc_root, pid = _v2_tree(tmp_path)
    (sys_root / "system.slice" / "train.service" / "memory.max").write_text("max\n")
    (sys_root / "system.slice" / "train.service" / "job" / "memory.pressure").unlink()
    reading = CgroupMemoryProbe(pid, str(sys_root), str(proc_root)).read()
    assert reading.limit_bytes is None and reading.limit_source is None and reading.limit_usage_bytes is None
    assert reading.max_events_total == 0, "no limit: the target's own group's count"
    assert (reading.pressure_some_avg10, reading.pressure_full_avg10) == (1.5, 0.5)
    assert reading.pressure_source == str(proc_root / "pressure" / "memory")


def test_v2_host_root_is_not_the_targets_usage(tmp_path):
    pid = os.getpid()
    _write_tree(tmp_path, {
        "proc/self/mountinfo": V2_MOUNTINFO,
        f"proc/{pid}/cgroup": "0::/\n",
        "sys/cgroup.controllers": "memory\n",
        "sys/memory.stat": "file 100\n",
        "sys/memory.pressure": "some avg10=7.00 avg60=0 avg300=0 total=1\nfull avg10=1.00 avg60=0 avg300=0 total=1\n",
    })
    reading = CgroupMemoryProbe(pid, str(tmp_path / "sys"), str(tmp_path / "proc")).read()
    assert reading.cgroup_path == "/" and reading.usage_bytes is None and reading.file_bytes is None
    assert reading.limit_bytes is None and "host's root" in (reading.reason or "")
    assert reading.pressure_some_avg10 == 7.0


def _v1_tree(tmp_path: Path) -> tuple[Path, Path, int]:
    pid = os.getpid()
    memory = "sys/memory"
    _write_tree(tmp_path, {
        "proc/self/mountinfo": V1_MOUNTINFO,
        f"proc/{pid}/cgroup": "4:memory:/docker/abc\n1:cpu:/\n0::/\n",
        "proc/vmstat": "oom_kill 0\n",
        "proc/pressure/memory": HOST_PRESSURE,
        f"{memory}/memory.limit_in_bytes": V1_UNLIMITED,
        f"{memory}/memory.use_hierarchy": "1\n",
        f"{memory}/docker/memory.limit_in_bytes": f"{GIB}\n",
        f"{memory}/docker/memory.memsw.limit_in_bytes": f"{GIB + 256 * MIB}\n",
        f"{memory}/docker/memory.usage_in_bytes": f"{900 * MIB}\n",
        f"{memory}/docker/memory.failcnt": "4\n",
        f"{memory}/docker/memory.memsw.failcnt": "1\n",
        f"{memory}/docker/memory.use_hierarchy": "1\n",
        f"{memory}/docker/abc/memory.limit_in_bytes": V1_UNLIMITED,
        f"{memory}/docker/abc/memory.memsw.limit_in_bytes": V1_UNLIMITED,
        f"{memory}/docker/abc/memory.usage_in_bytes": f"{800 * MIB}\n",
        f"{memory}/docker/abc/memory.memsw.usage_in_bytes": f"{850 * MIB}\n",
        f"{memory}/docker/abc/memory.failcnt": "0\n",
        f"{memory}/docker/abc/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
        f"{memory}/docker/abc/memory.stat": f"cache 1000\nrss 2000\ntotal_cache {100 * MIB}\ntotal_rss 1\n",
    })
    return tmp_path / "sys", tmp_path / "proc", pid


def test_v1_ancestor_limit_failcnt_and_an_oom_kill_after_the_target_died(tmp_path):
    sys_root, proc_root, pid = _v1_tree(tmp_path)
    probe = CgroupMemoryProbe(pid, str(sys_root), str(proc_root))
    docker, abc = sys_root / "memory" / "docker", sys_root / "memory" / "docker" / "abc"

    first = probe.read()
    assert first.cgroup_version == "v1" and first.cgroup_path == "/docker/abc"
    assert first.usage_bytes == 800 * MIB and first.file_bytes == 100 * MIB, "total_cache, not the group's own"
    assert first.limit_bytes == GIB and first.limit_source == str(docker) and first.limit_usage_bytes == 900 * MIB
    assert first.swap_usage_bytes == 50 * MIB, "memsw usage less memory usage"
    assert first.swap_limit_bytes == 256 * MIB, "memsw limit less memory limit"
    assert first.oom_kills_total == 0 and first.max_events_total == 5, "failcnt and memsw's where the limit is"
    # No cgroup2 memory.pressure here (the unified mount is absent under sys_root): the machine's PSI.
    assert first.pressure_source == str(proc_root / "pressure" / "memory")
    assert first.pressure_some_avg10 == 1.5 and first.reason is None

    # The OOM killer ends the target: its /proc entry goes, its group and counters stay.
    (proc_root / str(pid) / "cgroup").unlink()
    (abc / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    (docker / "memory.failcnt").write_text("30\n")
    (proc_root / "vmstat").write_text("oom_kill 0\n")
    after = probe.read()
    assert after.cgroup_path == "/docker/abc" and "target gone" in (after.reason or "")
    assert (after.oom_kills_total, after.oom_kills_new) == (1, 1)
    assert (after.max_events_total, after.max_events_new) == (31, 26)
    assert after.host_oom_kills_new == 0, "a cgroup's OOM is no global one"


def test_v1_parent_without_use_hierarchy_does_not_limit_its_children(tmp_path):
    sys_root, proc_root, pid = _v1_tree(tmp_path)
    (sys_root / "memory" / "docker" / "memory.use_hierarchy").write_text("0\n")
    reading = CgroupMemoryProbe(pid, str(sys_root), str(proc_root)).read()
    assert reading.limit_bytes is None and reading.limit_source is None


def test_v1_kernel_without_oom_kill_count_says_so(tmp_path):
    sys_root, proc_root, pid = _v1_tree(tmp_path)
    (sys_root / "memory" / "docker" / "abc" / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\n")
    reading = CgroupMemoryProbe(pid, str(sys_root), str(proc_root)).read()
    assert reading.oom_kills_total is None and "no oom_kill count" in (reading.reason or "")
    assert reading.limit_bytes == GIB


def test_hybrid_reads_the_cgroup2_groups_pressure(tmp_path):
    sys_root, proc_root, pid = _v1_tree(tmp_path)
    _write_tree(sys_root / "unified", {
        "cgroup.controllers": "",
        "memory.pressure": "some avg10=2.00 avg60=0 avg300=0 total=1\nfull avg10=0.25 avg60=0 avg300=0 total=1\n",
    })
    reading = CgroupMemoryProbe(pid, str(sys_root), str(proc_root)).read()
    assert reading.cgroup_version == "v1" and reading.limit_bytes == GIB
    assert reading.pressure_source == str(sys_root / "unified" / "memory.pressure")
    assert (reading.pressure_some_avg10, reading.pressure_full_avg10) == (2.0, 0.25)


def test_unreadable_target_never_raises(tmp_path):
    _write_tree(tmp_path, {"proc/vmstat": "oom_kill 7\n", "proc/pressure/memory": HOST_PRESSURE})
    reading = CgroupMemoryProbe(999_999_999, str(tmp_path / "sys"), str(tmp_path / "proc")).read()
    assert reading.cgroup_version is None and reading.usage_bytes is None
    assert "cannot read" in (reading.reason or "")
    assert reading.host_oom_kills_total == 7 and reading.pressure_some_avg10 == 1.5


def test_this_process_on_the_real_machine():
    reading = CgroupMemoryProbe(os.getpid()).read()
    if reading.cgroup_version is None:
        assert reading.reason
        return
    assert reading.usage_bytes is None or reading.usage_bytes > 0
    assert reading.limit_bytes is None or reading.limit_bytes > 0
