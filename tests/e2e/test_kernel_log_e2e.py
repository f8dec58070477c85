"""The kernel log sensor against this machine's real kernel: an Xid line written to /dev/kmsg, a real segfault
and a real OOM kill in a memory cgroup, each read back by KernelLog.read_new(); and the reason it gives a user
who may not read the log.

Root only (writing /dev/kmsg, making cgroups); each test skips with its reason elsewhere. Every line a test looks
for carries that test's own pid (the Xid's pid=, the dead child's pid), so tests running beside it do not see
each other's lines.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from probes.sensors.cgroup import parse_mountinfo
from probes.sensors.kernel_log import KernelEvent, KernelLog, xid_meaning

pytestmark = pytest.mark.slow

REPO = Path(__file__).parents[2]
KMSG = Path("/dev/kmsg")


def _need_root_and_kmsg() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: writing /dev/kmsg and reading it where kernel.dmesg_restrict=1")
    if not os.access(KMSG, os.R_OK | os.W_OK):
        pytest.skip("/dev/kmsg is missing or not readable and writable here (a container without the kernel log?)")


def _wait_for_event(log: KernelLog, matches, timeout: float = 20.0) -> tuple[KernelEvent, list[KernelEvent]]:
    """Poll read_new() until an event matches; return it and everything read meanwhile."""
    seen: list[KernelEvent] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen.extend(log.read_new())
        for event in seen:
            if matches(event):
                return event, seen
        assert log.reason is None, log.reason
        time.sleep(0.1)
    pytest.fail(f"no matching kernel event within {timeout}s; read {len(seen)}: {[e.raw for e in seen][-5:]}")


def test_an_xid_written_to_the_kernel_log_is_read_back_and_seen_by_a_later_reader():
    _need_root_and_kmsg()
    pid = os.getpid()
    log = KernelLog()
    log.read_new()  # what is already there
    assert log.reason is None
    line = f"NVRM: Xid (PCI:0000:3b:00): 79, pid={pid}, name=python, GPU has fallen off the bus."
    before = time.time()
    with open(KMSG, "w") as kmsg:  # root's write is logged as one record (facility user)
        kmsg.write(line + "\n")

    event, _ = _wait_for_event(log, lambda e: e.kind == "xid" and e.pid == pid)
    assert (event.code, event.pci_bus_id, event.process_name) == (79, "00000000:3B:00.0", "python")
    assert event.detail == "GPU has fallen off the bus." and event.raw == line
    assert xid_meaning(event) is not None and xid_meaning(event).points_at == "node"
    assert event.wall_time is not None and before - 2 <= event.wall_time <= time.time() + 2

    # A gputop attached after the GPU fell off still sees it: the first read looks back.
    later = KernelLog()
    again, _ = _wait_for_event(later, lambda e: e.kind == "xid" and e.pid == pid, timeout=5)
    assert again.raw == line and again.wall_time == pytest.approx(event.wall_time, abs=0.01)
    log.close()
    later.close()


def test_a_real_segfault_is_read_with_its_pid_and_library():
    _need_root_and_kmsg()
    trace = Path("/proc/sys/debug/exception-trace")
    if not trace.exists() or trace.read_text().strip() != "1":
        pytest.skip("this kernel does not log user segfaults (debug.exception-trace is not 1)")
    log = KernelLog()
    log.read_new()
    # -I: no PYTHONFAULTHANDLER from the environment, whose handler would make the death a raise(), not a fault.
    child = subprocess.Popen([sys.executable, "-I", "-c", "import ctypes; ctypes.string_at(0)"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert child.wait(timeout=30) == -11
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    # printk_ratelimit may drop the line when many processes segfault at once; then this fails rather than
    # skips, since the sensor's reading of a line that is there is what it checks.
    event, _ = _wait_for_event(log, lambda e: e.kind == "segfault" and e.pid == child.pid)
    assert event.process_name and event.process_name.startswith("python")
    assert event.address == "0" and event.library  # libc's strlen, as this machine's kernel names it
    log.close()


def _memory_cgroup_parent() -> tuple[str, Path]:
    with open("/proc/self/mountinfo") as f:
        mounts = parse_mountinfo(f.read())
    for root, point, fstype, options in mounts:
        if fstype == "cgroup" and root == "/" and "memory" in options.split(","):
            return "v1", Path(point)
    for root, point, fstype, _ in mounts:
        control = Path(point, "cgroup.subtree_control")
        if fstype == "cgroup2" and root == "/" and control.exists() and "memory" in control.read_text().split():
            return "v2", Path(point)
    pytest.skip("no memory controller to make a child cgroup in (neither v1 memory nor v2 with +memory)")


def _rmdir_when_empty(group: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while group.exists():
        try:
            group.rmdir()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # the killed task is still leaving the cgroup


def test_a_real_oom_kill_in_a_memory_cgroup_is_read_with_its_pid_and_memcg():
    _need_root_and_kmsg()
    version, parent = _memory_cgroup_parent()
    group = parent / f"gputop-kernel-log-{os.getpid()}"
    log = KernelLog()
    log.read_new()
    group.mkdir()
    child: subprocess.Popen[bytes] | None = None
    try:
        limit = str(64 * 1024 * 1024)
        if version == "v1":
            (group / "memory.limit_in_bytes").write_text(limit)
            if (group / "memory.memsw.limit_in_bytes").exists():  # no escape into swap either
                (group / "memory.memsw.limit_in_bytes").write_text(limit)
        else:
            (group / "memory.max").write_text(limit)
            if (group / "memory.swap.max").exists():
                (group / "memory.swap.max").write_text("0")
        # The child waits for a line on stdin, so it allocates only once it is inside the cgroup.
        allocate = ("import sys; sys.stdin.readline(); b = bytearray(1 << 30)\n"
                    "for i in range(0, len(b), 4096): b[i] = 1")
        child = subprocess.Popen([sys.executable, "-I", "-c", allocate], stdin=subprocess.PIPE,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        (group / "cgroup.procs").write_text(str(child.pid))
        assert child.stdin is not None
        child.stdin.write(b"go\n")
        child.stdin.close()
        assert child.wait(timeout=60) == -9  # SIGKILL from the OOM killer

        event, _ = _wait_for_event(log, lambda e: e.kind == "oom_kill" and e.pid == child.pid)
        assert event.memcg is True
        assert event.memcg_path == "/" + group.name  # oom_memcg=, relative to the hierarchy's root
        assert event.process_name and event.process_name.startswith("python")
        # About the limit (the mm's per-CPU RSS counters can run a few MiB past the memcg's charge), far below
        # the 1 GiB asked for.
        assert event.anon_rss_kb is not None and 16 * 1024 < event.anon_rss_kb < 256 * 1024
        assert "Killed process" in event.raw and "oom-kill:" in event.raw  # the kill's two lines, joined
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        _rmdir_when_empty(group)
        log.close()


def test_a_user_who_may_not_read_the_log_is_told_why_and_how():
    _need_root_and_kmsg()
    restrict = Path("/proc/sys/kernel/dmesg_restrict").read_text().strip()
    if restrict != "1":
        pytest.skip(f"kernel.dmesg_restrict is {restrict}: any user may read the log here")
    # Import as root (the venv may sit under a root-only home), then drop to nobody: no uid 0, no CAP_SYSLOG.
    script = ("import os; from probes.sensors.kernel_log import KernelLog\n"
              "os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)\n"
              "log = KernelLog(); print(log.read_new(), log.reason, sep='|')")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ("()|the kernel log is unreadable as this user (kernel.dmesg_restrict=1): run "
                                     "gputop as root or with CAP_SYSLOG")
