"""A real cgroup with a tiny CPU quota for a test's target: v1's cpu controller where the machine mounts it (this
machine's kind does), else a v2 group with cpu.max. Used through conftest's tiny_cpu_quota fixture."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

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
        for pid in (group / "cgroup.procs").read_text().split():
            try:
                (root / "cgroup.procs").write_text(pid)
            except OSError:
                pass  # already gone
        deadline = time.monotonic() + 5
        while True:
            try:
                group.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def group_name() -> str:
    return f"gputop_quota_{os.getpid()}"
