"""The CPU the target may use and how much of it it gets, from its cgroup: quota (minimum over the
ancestor chain), CFS throttling, usage and CPU pressure; plus its CPU affinity. And its memory (CgroupMemoryProbe):
usage, the lowest limit over the ancestor chain, swap, OOM kills, limit hits and memory pressure.

This module is the only one that touches /sys/fs/cgroup. It handles cgroup v2, v1 (cpu and cpuacct,
co-mounted or not; memory) and hybrid hosts (v1 controllers beside a cgroup2 mount, usually at
/sys/fs/cgroup/unified). Mount points come from /proc/self/mountinfo, because containers and
distributions mount hierarchies in different places; well-known paths are only a fallback.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from probes.frame import CpuReading
from probes.machine_records import MemoryReading
from probes.sensors.proc_readers import PAGE_BYTES
from probes.sensors.textfiles import read_text

DEFAULT_SYS_ROOT = "/sys/fs/cgroup"


@dataclass(frozen=True)
class _Mount:
    root: str  # the cgroup mounted there, as /proc/PID/cgroup names it ("/" unless a container's view)
    directory: str  # where it is mounted, under sys_root
    version: str  # "v1" or "v2"
    controllers: frozenset[str]  # v1 only: cpu, cpuacct, ...


@dataclass(frozen=True)
class _Place:
    """Where a mount shows a cgroup: the mount, and the cgroup's path relative to what it shows."""

    mount: _Mount
    relative: str

    @property
    def directory(self) -> str:
        return _join(self.mount.directory, self.relative)


@dataclass(frozen=True)
class _Location:
    """Where the target's CPU controller files are."""

    version: str
    relative_path: str  # the target's cgroup relative to the controller's mount
    cpu_dir: str
    top_dir: str  # the mount's directory: the ancestor walk stops here
    usage_dir: str | None  # the cgroup whose CPU-usage counter covers exactly the target's cpu cgroup
    pressure_dir: str | None  # the target's cgroup in a cgroup2 hierarchy, for cpu.pressure


@dataclass(frozen=True)
class _Counters:
    at: float
    stats_dir: str | None
    nr_periods: int | None
    nr_throttled: int | None
    throttled_seconds: float | None
    usage_source: str | None  # the file (or "tree") the usage figure came from
    usage_seconds: float | None


def _unescape_mount_path(path: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal.
    if "\\" not in path:
        return path
    out, i = [], 0
    while i < len(path):
        if path[i] == "\\" and len(path[i + 1 : i + 4]) == 3 and path[i + 1 : i + 4].isdigit():
            out.append(chr(int(path[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(path[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[tuple[str, str, str, str]]:
    """(root, mount point, filesystem type, super options) for every cgroup and cgroup2 mount."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        mounts.append((_unescape_mount_path(fields[3]), _unescape_mount_path(fields[4]), tail[0], tail[2]))
    return mounts


def parse_proc_cgroup(text: str) -> list[tuple[frozenset[str], str]]:
    """(controllers, path) per line of /proc/PID/cgroup; v2's line has no controllers."""
    entries = []
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        controllers = frozenset(c for c in parts[1].split(",") if c)
        entries.append((controllers, parts[2]))
    return entries


def _parse_keyed(text: str) -> dict[str, int]:
    values = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            values[parts[0]] = int(parts[1])
    return values


def _pressure_some_avg10(text: str) -> float | None:
    return _pressure_avg10(text, "some")


def _pressure_avg10(text: str, kind: str) -> float | None:
    """avg10 of PSI's "some" or "full" line, percent."""
    for line in text.splitlines():
        if line.startswith(kind + " "):
            for item in line.split()[1:]:
                key, _, value = item.partition("=")
                if key == "avg10":
                    try:
                        return float(value)
                    except ValueError:
                        return None
    return None


class _CgroupReader:
    """What every controller's probe shares: the cgroup mounts, and where one of them shows the target's cgroup."""

    # v1 mount directories to try, under sys_root, when mountinfo lists no cgroup mount.
    _V1_GUESSES: tuple[str, ...] = ()

    def __init__(self, pid: int, sys_root: str, proc_root: str) -> None:
        self.pid = pid
        self._sys_root = sys_root.rstrip("/") or "/"
        self._proc_root = proc_root
        self._mounts: list[_Mount] | None = None

    def _rebase(self, mount_point: str) -> str:
        """A mount point as seen through sys_root (tests point sys_root at a fake tree)."""
        if mount_point == DEFAULT_SYS_ROOT or mount_point.startswith(DEFAULT_SYS_ROOT + "/"):
            return self._sys_root + mount_point[len(DEFAULT_SYS_ROOT) :]
        return mount_point

    def _entries(self) -> tuple[list[tuple[frozenset[str], str]] | None, str | None]:
        """The target's /proc/PID/cgroup lines (controllers, path), or None and why it cannot be read (gone)."""
        cgroup_file = os.path.join(self._proc_root, str(self.pid), "cgroup")
        text = read_text(cgroup_file)
        if text is None:
            return None, f"cannot read {cgroup_file}"
        return parse_proc_cgroup(text), None

    def _find_mounts(self) -> list[_Mount]:
        if self._mounts is not None:
            return self._mounts
        mounts = []
        text = read_text(os.path.join(self._proc_root, "self", "mountinfo"))
        for root, point, fstype, options in parse_mountinfo(text or ""):
            if fstype == "cgroup2":
                mounts.append(_Mount(root, self._rebase(point), "v2", frozenset()))
            else:
                mounts.append(_Mount(root, self._rebase(point), "v1", frozenset(options.split(","))))
        if not mounts:
            mounts = self._guess_mounts()
        self._mounts = mounts
        return mounts

    def _guess_mounts(self) -> list[_Mount]:
        """The usual layouts, for when mountinfo cannot be read or lists no cgroup mount."""
        root = self._sys_root
        if os.path.exists(os.path.join(root, "cgroup.controllers")):
            return [_Mount("/", root, "v2", frozenset())]
        mounts: list[_Mount] = []
        for name in self._V1_GUESSES:
            directory = os.path.join(root, name)
            if os.path.isdir(directory) and not any(os.path.samefile(directory, m.directory) for m in mounts):
                mounts.append(_Mount("/", directory, "v1", frozenset(name.split(","))))
        if os.path.exists(os.path.join(root, "unified", "cgroup.controllers")):
            mounts.append(_Mount("/", os.path.join(root, "unified"), "v2", frozenset()))
        return mounts

    @staticmethod
    def _relative(mount: _Mount, path: str) -> str | None:
        """The cgroup `path` relative to what `mount` shows; None when it lies outside it."""
        if ".." in path.split("/"):
            return None  # outside our cgroup namespace
        if mount.root == "/":
            return path
        if path == mount.root:
            return "/"
        if path.startswith(mount.root + "/"):
            return path[len(mount.root) :]
        return None

    def _place(self, mounts: list[_Mount], version: str, controller: str | None, path: str) -> _Place | None:
        """Where the first mount of that kind shows `path`; None when none does."""
        for mount in mounts:
            if mount.version != version or (controller and controller not in mount.controllers):
                continue
            relative = self._relative(mount, path)
            if relative is not None:
                return _Place(mount, relative)
        return None


class CgroupCpuProbe(_CgroupReader):
    """Reads the target's cgroup CPU figures; rates are deltas against the previous read()."""

    _V1_GUESSES = ("cpu,cpuacct", "cpu", "cpuacct")

    def __init__(
        self,
        pid: int,
        sys_root: str = DEFAULT_SYS_ROOT,
        proc_root: str = "/proc",
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(pid, sys_root, proc_root)
        self._clock = clock
        self._location: _Location | None = None
        self._previous: _Counters | None = None

    def read(self, runnable_threads: int | None = None, tree_cpu_seconds: float | None = None) -> CpuReading:
        """The target's CPU limits and use now. Never raises."""
        try:
            return self._read(runnable_threads, tree_cpu_seconds)
        except Exception as error:
            return CpuReading(runnable_threads=runnable_threads, reason=f"cgroup read failed: {error}")

    # --- locating the cgroup ----------------------------------------------------------------------

    def _locate(self) -> tuple[_Location | None, str | None]:
        entries, unread = self._entries()
        if entries is None:
            return (self._location, "target gone; reading its last cgroup") if self._location is not None \
                else (None, unread)
        mounts = self._find_mounts()
        v2_path = next((path for controllers, path in entries if not controllers), None)
        v1_paths = {c: path for controllers, path in entries for c in controllers}

        v2 = None if v2_path is None else self._place(mounts, "v2", None, v2_path)
        pressure_dir = None if v2 is None else v2.directory

        if "cpu" in v1_paths:
            cpu = self._place(mounts, "v1", "cpu", v1_paths["cpu"])
            if cpu is None:
                return (
                    None,
                    f"the target's v1 cpu cgroup {v1_paths['cpu']} is not mounted where we can see it",
                )
            usage_dir = None
            # cpuacct.usage speaks for the quota's cgroup only when both name the same group, and the
            # host's root group counts the whole machine, which is no measure of the target.
            host_root = cpu.relative == "/" and cpu.mount.root == "/"
            if v1_paths.get("cpuacct") == v1_paths["cpu"] and not host_root:
                acct = self._place(mounts, "v1", "cpuacct", v1_paths["cpuacct"])
                if acct is not None:
                    usage_dir = acct.directory
            location = _Location("v1", cpu.relative, cpu.directory, cpu.mount.directory, usage_dir, pressure_dir)
        elif v2 is not None:
            # Only the host's root group lacks cpu.max; a container's root (cgroup namespace) has one.
            host_root = v2.relative == "/" and not os.path.exists(os.path.join(v2.directory, "cpu.max"))
            usage_dir = None if host_root else v2.directory
            location = _Location("v2", v2.relative, v2.directory, v2.mount.directory, usage_dir, v2.directory)
        else:
            return None, "no cgroup cpu controller found for the target (neither v1 cpu nor a cgroup2 mount)"
        self._location = location
        return location, None

    # --- reading ----------------------------------------------------------------------------------

    def _quota(self, location: _Location) -> tuple[float | None, str | None, int | None, str | None]:
        """(quota in CPUs, directory holding it, its period, problem) as the minimum over the ancestors."""
        best: tuple[float, str, int] | None = None
        own_period = None
        problem = None
        directory = location.cpu_dir
        while True:
            limit, period, error = _read_limit(location.version, directory)
            if error and problem is None:
                problem = error
            if directory == location.cpu_dir:
                own_period = period
            if limit is not None and period and (best is None or limit / period < best[0]):
                best = (limit / period, directory, period)
            if os.path.normpath(directory) == os.path.normpath(location.top_dir):
                break
            parent = os.path.dirname(directory.rstrip("/"))
            if not parent or parent == directory or len(parent) < len(location.top_dir):
                break
            directory = parent
        if best is None:
            return None, None, own_period, problem
        return round(best[0], 4), best[1], best[2], problem

    def _read(self, runnable_threads: int | None, tree_cpu_seconds: float | None) -> CpuReading:
        reasons: list[str] = []
        now = self._clock()
        affinity = self._affinity(reasons)
        location, problem = self._locate()
        if problem:
            reasons.append(problem)
        if location is None:
            usage = self._tree_usage_only(now, tree_cpu_seconds)
            return CpuReading(
                affinity_cpus=affinity,
                effective_cpus=float(affinity) if affinity is not None else None,
                usage_cpus=usage,
                runnable_threads=runnable_threads,
                reason="; ".join(reasons) or None,
            )

        quota, quota_source, period, quota_problem = self._quota(location)
        if quota_problem:
            reasons.append(quota_problem)

        # Throttling is counted by the cgroup whose limit binds, which may be an ancestor.
        stats_dir = quota_source or location.cpu_dir
        stat_text = read_text(os.path.join(stats_dir, "cpu.stat"))
        stat = _parse_keyed(stat_text or "")
        if stat_text is None:
            reasons.append(f"cannot read {os.path.join(stats_dir, 'cpu.stat')}")
        nr_periods = stat.get("nr_periods")
        nr_throttled = stat.get("nr_throttled")
        if "throttled_usec" in stat:
            throttled_seconds = stat["throttled_usec"] / 1e6
        elif "throttled_time" in stat:
            throttled_seconds = stat["throttled_time"] / 1e9
        else:
            throttled_seconds = None

        usage_source, usage_seconds = self._usage_counter(location, tree_cpu_seconds, reasons)
        counters = _Counters(
            now, stats_dir, nr_periods, nr_throttled, throttled_seconds, usage_source, usage_seconds
        )
        previous, self._previous = self._previous, counters

        usage_cpus = throttled_fraction = throttled_per_s = None
        if previous is not None and now > previous.at:
            elapsed = now - previous.at
            if previous.usage_source == usage_source:
                usage_cpus = _rate(previous.usage_seconds, usage_seconds, elapsed)
            if previous.stats_dir == stats_dir:
                throttled_per_s = _rate(previous.throttled_seconds, throttled_seconds, elapsed)
                throttled_fraction = _throttled_fraction(previous, counters)

        pressure = None
        if location.pressure_dir is None:
            reasons.append("no cpu.pressure (no cgroup2 hierarchy)")
        else:
            pressure_text = read_text(os.path.join(location.pressure_dir, "cpu.pressure"))
            if pressure_text is None:
                reasons.append("cpu.pressure not readable (PSI off or not exposed)")
            else:
                pressure = _pressure_some_avg10(pressure_text)

        limits = [x for x in (affinity, quota) if x is not None]
        return CpuReading(
            cgroup_version=location.version,
            cgroup_path=location.relative_path,
            quota_cpus=quota,
            quota_source=quota_source,
            period_us=period,
            affinity_cpus=affinity,
            effective_cpus=float(min(limits)) if limits else None,
            usage_cpus=usage_cpus,
            throttled_fraction=throttled_fraction,
            throttled_seconds_per_s=throttled_per_s,
            nr_periods=nr_periods,
            nr_throttled=nr_throttled,
            throttled_seconds_total=throttled_seconds,
            pressure_some_avg10=pressure,
            runnable_threads=runnable_threads,
            reason="; ".join(reasons) or None,
        )

    def _affinity(self, reasons: list[str]) -> int | None:
        try:
            return len(os.sched_getaffinity(self.pid))
        except OSError as error:
            reasons.append(f"cannot read CPU affinity: {error.strerror or error}")
            return None

    def _usage_counter(
        self, location: _Location, tree_cpu_seconds: float | None, reasons: list[str]
    ) -> tuple[str | None, float | None]:
        """(source, cumulative CPU seconds) of the cgroup, else of the target's tree."""
        if location.usage_dir is not None:
            if location.version == "v2":
                path = os.path.join(location.usage_dir, "cpu.stat")
                usage_usec = _parse_keyed(read_text(path) or "").get("usage_usec")
                if usage_usec is not None:
                    return path, usage_usec / 1e6
            else:
                path = os.path.join(location.usage_dir, "cpuacct.usage")
                text = (read_text(path) or "").strip()
                if text.isdigit():
                    return path, int(text) / 1e9
        if tree_cpu_seconds is not None:
            return "tree", tree_cpu_seconds
        reasons.append("no CPU usage counter for the target's cgroup")
        return None, None

    def _tree_usage_only(self, now: float, tree_cpu_seconds: float | None) -> float | None:
        """With no cgroup to read, the tree's own CPU time is the only usage figure."""
        source = "tree" if tree_cpu_seconds is not None else None
        previous = self._previous
        self._previous = _Counters(now, None, None, None, None, source, tree_cpu_seconds)
        if previous is None or source is None or previous.usage_source != source or now <= previous.at:
            return None
        return _rate(previous.usage_seconds, tree_cpu_seconds, now - previous.at)


@dataclass(frozen=True)
class _MemoryLocation:
    """Where the target's memory controller files are."""

    version: str
    relative_path: str  # the target's cgroup relative to the controller's mount
    memory_dir: str
    top_dir: str  # the mount's directory: the ancestor walk stops here
    pressure_dir: str | None  # the target's cgroup in a cgroup2 hierarchy, for memory.pressure
    host_root: bool  # the host's root group: its usage is the whole machine's, no measure of the target


# v1 writes "no limit" as the largest page-aligned counter (9223372036854771712 with 4 KiB pages).
_V1_UNLIMITED = 1 << 62


class CgroupMemoryProbe(_CgroupReader):
    """Reads the target's memory cgroup; the `_new` counts are changes against the previous read().

    PSI comes from the target's cgroup2 group where there is one (on a hybrid host that group may differ from the
    v1 memory group; pressure_source names the file), else from /proc/pressure/memory, the whole machine's: the
    kernel's root-group figures under another name, so read here rather than by a module of its own. The machine's
    OOM kill count (/proc/vmstat) is read beside them, because a kill by the global OOM killer (no cgroup limit,
    the machine out of memory) shows in no cgroup file of a target in the host's root group."""

    _V1_GUESSES = ("memory",)

    def __init__(self, pid: int, sys_root: str = DEFAULT_SYS_ROOT, proc_root: str = "/proc") -> None:
        super().__init__(pid, sys_root, proc_root)
        self._location: _MemoryLocation | None = None
        self._previous: dict[str, tuple[str, int | None]] = {}

    def read(self) -> MemoryReading:
        """The target's memory use, limit and OOM kills now. Never raises."""
        try:
            return self._read()
        except Exception as error:
            return MemoryReading(reason=f"cgroup memory read failed: {error}")

    def _locate(self) -> tuple[_MemoryLocation | None, str | None]:
        entries, unread = self._entries()
        if entries is None:  # a target the OOM killer ended is the case to explain: its group outlives it
            return (self._location, "target gone; reading its last cgroup") if self._location is not None \
                else (None, unread)
        mounts = self._find_mounts()
        v2_path = next((path for controllers, path in entries if not controllers), None)
        v1_path = next((path for controllers, path in entries if "memory" in controllers), None)
        v2 = None if v2_path is None else self._place(mounts, "v2", None, v2_path)
        pressure_dir = None if v2 is None else v2.directory
        if v1_path is not None:
            place = self._place(mounts, "v1", "memory", v1_path)
            if place is None:
                return None, f"the target's v1 memory cgroup {v1_path} is not mounted where we can see it"
            host_root = place.relative == "/" and place.mount.root == "/"
            location = _MemoryLocation(
                "v1", place.relative, place.directory, place.mount.directory, pressure_dir, host_root
            )
        elif v2 is not None:
            # Only the host's root group lacks memory.current; a container's root (cgroup namespace) has one.
            host_root = v2.relative == "/" and not os.path.exists(os.path.join(v2.directory, "memory.current"))
            location = _MemoryLocation("v2", v2.relative, v2.directory, v2.mount.directory, v2.directory, host_root)
        else:
            return None, "no cgroup memory controller found for the target (neither v1 memory nor a cgroup2 mount)"
        self._location = location
        return location, None

    def _ancestors(self, location: _MemoryLocation) -> list[str]:
        """The target's group and each ancestor whose limit covers it, up to the mount's directory."""
        chain, directory = [location.memory_dir], location.memory_dir
        top = os.path.normpath(location.top_dir)
        while os.path.normpath(directory) != top:
            parent = os.path.dirname(directory.rstrip("/"))
            if not parent or parent == directory or len(parent) < len(location.top_dir):
                break
            # Old v1 kernels let a parent with use_hierarchy 0 leave its children's pages uncharged to it.
            if location.version == "v1" and _int_file(os.path.join(parent, "memory.use_hierarchy")) == 0:
                break
            chain.append(parent)
            directory = parent
        return chain

    def _read(self) -> MemoryReading:
        reasons: list[str] = []
        location, problem = self._locate()
        if problem:
            reasons.append(problem)
        vmstat = _parse_keyed(read_text(os.path.join(self._proc_root, "vmstat")) or "")
        host_kills = self._counter("host", "vmstat", vmstat.get("oom_kill"))
        swapped_in_pages = self._counter("host_swap_in", "vmstat", vmstat.get("pswpin"))[1]
        swapped_in = None if swapped_in_pages is None else swapped_in_pages * PAGE_BYTES
        if location is None:
            some, full, source, machine = self._pressure(None, reasons)
            return MemoryReading(
                host_oom_kills_total=host_kills[0], host_oom_kills_new=host_kills[1],
                host_swapped_in_bytes_new=swapped_in, pressure_some_avg10=some,
                pressure_full_avg10=full, pressure_source=source, pressure_whole_machine=machine,
                reason="; ".join(reasons) or None,
            )
        v2 = location.version == "v2"
        directory = location.memory_dir
        usage = None
        if location.host_root:
            reasons.append("the target is in the host's root memory cgroup: its usage is the whole machine's")
        else:
            usage = _int_file(os.path.join(directory, "memory.current" if v2 else "memory.usage_in_bytes"))
            if usage is None:
                reasons.append(f"no memory usage counter in {directory}")
        stat = _parse_keyed(read_text(os.path.join(directory, "memory.stat")) or "")
        file_bytes = None if location.host_root else stat.get("file" if v2 else "total_cache")

        limit = limit_dir = swap_limit = None
        for ancestor in self._ancestors(location):
            own, own_swap = _memory_limits(location.version, ancestor)
            if own is not None and (limit is None or own < limit):
                limit, limit_dir = own, ancestor
            if own_swap is not None and (swap_limit is None or own_swap < swap_limit):
                swap_limit = own_swap
        limit_usage = None
        if limit_dir is not None:
            limit_usage = _int_file(os.path.join(limit_dir, "memory.current" if v2 else "memory.usage_in_bytes"))

        # Hits of the limit are counted where the limit is; a kill is counted in the victim's own group (v1) or
        # in it and each ancestor (v2), so the target's group sees the kills of its own processes either way.
        hits_dir = limit_dir or directory
        if v2:
            swap_usage = _int_file(os.path.join(directory, "memory.swap.current"))
            kills_file, hits_file = os.path.join(directory, "memory.events"), os.path.join(hits_dir, "memory.events")
            kills = _parse_keyed(read_text(kills_file) or "").get("oom_kill")
            hits = _parse_keyed(read_text(hits_file) or "").get("max")
        else:
            memsw = _int_file(os.path.join(directory, "memory.memsw.usage_in_bytes"))
            swap_usage = None if memsw is None or usage is None else max(0, memsw - usage)
            kills_file = os.path.join(directory, "memory.oom_control")
            hits_file = os.path.join(hits_dir, "memory.failcnt")
            kills = _parse_keyed(read_text(kills_file) or "").get("oom_kill")  # Linux 4.13 and later
            hits = _int_file(hits_file)
            # With a memory+swap limit too, the charge that fails first, and so counts, may be memsw's.
            memsw_hits = _int_file(os.path.join(hits_dir, "memory.memsw.failcnt"))
            hits = None if hits is None else hits + (memsw_hits or 0)
        if kills is None:
            reasons.append(f"no oom_kill count in {kills_file}")
        oom = self._counter("oom", kills_file, kills)
        max_events = self._counter("max", hits_file, hits)
        some, full, source, machine = self._pressure(location.pressure_dir, reasons)
        return MemoryReading(
            cgroup_version=location.version,
            cgroup_path=location.relative_path,
            usage_bytes=usage,
            file_bytes=file_bytes,
            limit_bytes=limit,
            limit_source=limit_dir,
            limit_usage_bytes=limit_usage,
            swap_usage_bytes=swap_usage,
            swap_limit_bytes=swap_limit,
            oom_kills_total=oom[0],
            oom_kills_new=oom[1],
            max_events_total=max_events[0],
            max_events_new=max_events[1],
            host_oom_kills_total=host_kills[0],
            host_oom_kills_new=host_kills[1],
            host_swapped_in_bytes_new=swapped_in,
            pressure_some_avg10=some,
            pressure_full_avg10=full,
            pressure_source=source,
            pressure_whole_machine=machine,
            reason="; ".join(reasons) or None,
        )

    def _counter(self, name: str, source: str, total: int | None) -> tuple[int | None, int | None]:
        """(total, change since the previous read); no change is claimed across a change of file, or when the
        count went back (its group was removed and made again)."""
        before = self._previous.get(name)
        self._previous[name] = (source, total)
        if total is None or before is None or before[0] != source or before[1] is None or total < before[1]:
            return total, None
        return total, total - before[1]

    def _pressure(self, pressure_dir: str | None,
                  reasons: list[str]) -> tuple[float | None, float | None, str | None, bool | None]:
        """(some avg10, full avg10, the file read, whether it is the whole machine's): the cgroup's own PSI, else
        the machine's. The hierarchy's true root group (it has no cgroup.events) is the machine's too: a process
        there, as on a hybrid host whose cgroup2 tree nobody uses, shares its PSI with every other process."""
        paths = [(os.path.join(pressure_dir, "memory.pressure"),
                  not os.path.exists(os.path.join(pressure_dir, "cgroup.events")))] if pressure_dir else []
        paths.append((os.path.join(self._proc_root, "pressure", "memory"), True))
        for path, machine in paths:
            text = read_text(path)
            if text is not None:
                return _pressure_avg10(text, "some"), _pressure_avg10(text, "full"), path, machine
        reasons.append("memory pressure not readable (PSI off or not exposed)")
        return None, None, None, None


def _int_file(path: str) -> int | None:
    text = (read_text(path) or "").strip()
    return int(text) if text.lstrip("-").isdigit() else None


def _memory_limits(version: str, directory: str) -> tuple[int | None, int | None]:
    """(memory limit, swap limit) of one directory, None for none."""
    if version == "v2":
        # The root, or a group whose parent does not enable the memory controller, has no memory.max: no limit.
        texts = [(read_text(os.path.join(directory, name)) or "").strip() for name in ("memory.max", "memory.swap.max")]
        memory, swap = (int(text) if text.isdigit() else None for text in texts)
        return memory, swap
    memory = _int_file(os.path.join(directory, "memory.limit_in_bytes"))
    memsw = _int_file(os.path.join(directory, "memory.memsw.limit_in_bytes"))
    memory = memory if memory is not None and memory < _V1_UNLIMITED else None
    # v1 limits memory and swap together (memsw); the swap left beyond the memory limit is their difference.
    swap = memsw - memory if memory is not None and memsw is not None and memsw < _V1_UNLIMITED else None
    return memory, swap


def _join(directory: str, relative: str) -> str:
    return os.path.join(directory, relative.lstrip("/")).rstrip("/") if relative != "/" else directory


def _read_limit(version: str, directory: str) -> tuple[int | None, int | None, str | None]:
    """(quota µs or None for none, period µs, problem) of one cgroup directory."""
    if version == "v2":
        path = os.path.join(directory, "cpu.max")
        try:
            with open(path, encoding="utf-8") as f:
                fields = f.read().split()
        except FileNotFoundError:
            return None, None, None  # the root, or the cpu controller not enabled here: no limit
        except OSError as error:
            return None, None, f"cannot read {path}: {error.strerror}"
        if len(fields) != 2 or not fields[1].isdigit() or not (fields[0] == "max" or fields[0].isdigit()):
            return None, None, f"cannot parse {path}"
        return (None if fields[0] == "max" else int(fields[0])), int(fields[1]), None
    quota_text = read_text(os.path.join(directory, "cpu.cfs_quota_us"))
    period_text = read_text(os.path.join(directory, "cpu.cfs_period_us"))
    if quota_text is None or period_text is None:
        return None, None, f"cannot read the CFS quota in {directory}"
    try:
        quota, period = int(quota_text), int(period_text)
    except ValueError:
        return None, None, f"cannot parse the CFS quota in {directory}"
    return (quota if quota > 0 else None), period, None


def _rate(before: float | None, after: float | None, elapsed: float) -> float | None:
    if before is None or after is None or after < before:
        return None  # a counter that went backwards was reset (or its source changed)
    return round((after - before) / elapsed, 4)


def _throttled_fraction(previous: _Counters, current: _Counters) -> float | None:
    if (previous.nr_periods is None or current.nr_periods is None
            or previous.nr_throttled is None or current.nr_throttled is None):
        return None
    periods = current.nr_periods - previous.nr_periods
    throttled = current.nr_throttled - previous.nr_throttled
    if periods < 0 or throttled < 0:
        return None
    if periods == 0:
        return 0.0  # no CFS period ran: nothing limited it (no quota, or the group was idle)
    return round(min(1.0, throttled / periods), 4)
