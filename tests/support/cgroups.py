"""Real cgroups made for one test: a tiny CPU quota (tiny_cpu_quota) and a memory limit without swap (MemoryGroup),
v1's controller where the machine mounts it (this machine's kind does), else a cgroup2 group. Used through
conftest's tiny_cpu_quota and memory_group fixtures."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from probes.sensors.cgroup import parse_mountinfo

CGROUP_ROOT = Path("/sys/fs/cgroup")
QUOTA_CPUS = 0.2  # 20 ms of each 100 ms period


@contextmanager
def tiny_cpu_quota(name: str) -> Iterator[Callable[[int], None]]:
    """A cgroup limited to QUOTA_CPUS named `name`; yields a function that moves a PID into it. Removed afterwards,
    its processes moved back to the root first. Raises OSError where no such group can be made here."""
    v1 = CGROUP_ROOT / "cpu"
    if (v1 / "cpu.cfs_quota_us").exists():
        root, group = v1, v1 / name
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text(str(int(QUOTA_CPUS * 100000)))
    else:
        root, group = CGROUP_ROOT, CGROUP_ROOT / name
        group.mkdir()
        (group / "cpu.max").write_text(f"{int(QUOTA_CPUS * 100000)} 100000")

    def enter(pid: int) -> None:
        (group / "cgroup.procs").write_text(str(pid))

    try:
        yield enter
    finally:
        remove_group(root, group)


def group_name() -> str:
    return f"gputop_quota_{os.getpid()}"


class MemoryGroup:
    """A memory cgroup with a limit and no swap (or, with `swap`, swap as the machine has it), made for one test and
    removed after it."""

    def __init__(self, name: str, limit_bytes: int, swap: bool = False) -> None:
        with open("/proc/self/mountinfo") as f:
            mounts = parse_mountinfo(f.read())
        v1 = [point for root, point, fstype, opts in mounts
              if fstype == "cgroup" and root == "/" and "memory" in opts.split(",")]
        v2 = [point for root, point, fstype, _ in mounts if fstype == "cgroup2" and root == "/"]
        if v1:
            self.version, self.root = "v1", Path(v1[0])
        elif v2 and "memory" in Path(v2[0], "cgroup.subtree_control").read_text().split():
            self.version, self.root = "v2", Path(v2[0])
        else:
            pytest.skip("no memory controller to make a child cgroup in (neither v1 memory nor v2 with +memory)")
        self.path = self.root / name
        try:
            self.path.mkdir()
        except OSError as error:
            pytest.skip(f"memory controller not writable: cannot create {self.path}: {error.strerror}")
        # No swap either, so that the limit is reached, and a kill comes, when the rate says. On v1 through
        # swappiness, not a memsw limit: Linux 6.18 counts a hit of a memsw limit in neither failcnt (seen here).
        if self.version == "v1":
            (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))
            if (self.path / "memory.swappiness").exists():
                (self.path / "memory.swappiness").write_text("60" if swap else "0")  # 60: the kernel's default
        else:
            (self.path / "memory.max").write_text(str(limit_bytes))
            if (self.path / "memory.swap.max").exists():
                (self.path / "memory.swap.max").write_text("max" if swap else "0")

    def join(self) -> None:
        """Moves the calling process in: run in the target's child before exec, so all it allocates is charged
        here (v1 leaves pages charged where they were when a process moves)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def remove(self) -> None:
        remove_group(self.root, self.path)


class PressureGroup:
    """A cgroup2 group of the target's own, for its own memory PSI (memory.pressure), on a host whose cgroup2
    hierarchy carries no memory controller (a hybrid host: v1's memory controller, cgroup2 mounted beside it). The
    kernel accounts PSI per cgroup2 group whatever controllers it enables; without such a group a v1 job's PSI is the
    whole machine's. Made for one test and removed after it."""

    def __init__(self, name: str) -> None:
        with open("/proc/self/mountinfo") as f:
            mounts = parse_mountinfo(f.read())
        v2 = [point for root, point, fstype, _ in mounts if fstype == "cgroup2" and root == "/"]
        if not v2 or not Path(v2[0], "memory.pressure").exists():
            pytest.skip("no cgroup2 hierarchy with PSI (memory.pressure) to make a group in")
        self.root = Path(v2[0])
        self.path = self.root / name
        try:
            self.path.mkdir()
        except OSError as error:
            pytest.skip(f"cgroup2 not writable: cannot create {self.path}: {error.strerror}")

    def join(self) -> None:
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def remove(self) -> None:
        remove_group(self.root, self.path)


def remove_group(root: Path, group: Path, wait_s: float = 10.0) -> None:
    """Move the group's processes back to the root, then remove it, waiting up to `wait_s` for it to empty (a process
    just killed can hold the group a moment)."""
    for pid in (group / "cgroup.procs").read_text().split():
        try:
            (root / "cgroup.procs").write_text(pid)
        except OSError:
            pass  # it exited meanwhile
    deadline = time.monotonic() + wait_s
    while True:
        try:
            group.rmdir()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def groups_made(make_group: Callable[..., MemoryGroup | PressureGroup]) -> Iterator[Callable[..., object]]:
    """A cgroup fixture's body (`yield from` it): a factory whose groups (`make_group(number, *args)`, the number
    telling one test's groups apart) are removed when the test ends; the test skips without root."""
    if os.geteuid() != 0:
        pytest.skip("making cgroups needs root")
    made: list[MemoryGroup | PressureGroup] = []

    def make(*args: object, **kwargs: object) -> MemoryGroup | PressureGroup:
        group = make_group(len(made), *args, **kwargs)
        made.append(group)
        return group

    try:
        yield make
    finally:
        for group in made:
            group.remove()


@contextmanager
def swap_file(path: Path, size_bytes: int) -> Iterator[None]:
    """A swap file of `size_bytes` at `path`, on (swapon) while the block runs, then off and removed. Skips where
    this machine cannot make one (not root, a file system that takes no swap, a container that forbids swapon).
    Groups made with MemoryGroup's default (no swap) never use it; the machine's other processes swap only under
    the machine's own pressure."""
    if os.geteuid() != 0:
        pytest.skip("turning swap on needs root")
    free = shutil.disk_usage(path.parent).free
    if free < 2 * size_bytes:  # a machine's disk can be nearly full (287 MB free was seen on one of this kind)
        pytest.skip(f"no room for a swap file: {free >> 20} MiB free under {path.parent}")
    with open(path, "wb") as handle:
        chunk = bytes(1 << 20)
        for _ in range(size_bytes >> 20):  # written, not sparse: swapon refuses a file with holes
            handle.write(chunk)
    path.chmod(0o600)
    made = subprocess.run(["mkswap", str(path)], capture_output=True, text=True)
    on = made.returncode == 0 and subprocess.run(["swapon", str(path)], capture_output=True, text=True)
    if not on or on.returncode != 0:
        path.unlink()
        said = made.stderr if made.returncode != 0 else on.stderr if on else ""
        pytest.skip(f"no swap file here: {said.strip() or 'mkswap or swapon failed'}")
    try:
        yield
    finally:
        subprocess.run(["swapoff", str(path)], capture_output=True)
        path.unlink()
