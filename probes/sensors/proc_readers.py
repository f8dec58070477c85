"""One process's /proc files as the tree walk (probes/sensors/proctree.py) reads them each tick, and the rates
between two reads.

One read of /proc/PID/stat (:func:`read_stat`) gives what a tick needs of a process; one pass over /proc/PID/task
(:func:`scan_tasks`) gives its threads' states, the next level of the tree and its main thread's counters
(schedstat, status, io: :func:`main_thread_counters`); its command line (:func:`read_cmdline`) and interpreter
version (:func:`python_version`) are read when the walk asks. :class:`PreviousRead` is one process's baseline,
against which :func:`main_thread_rates` and :func:`socket_byte_rates` turn counters into rates. Nothing here
keeps state: what is cached between ticks, and when a file is read again, is the walk's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psutil

from probes.sensors.tcpinfo import TcpSocket
from probes.sensors.textfiles import read_text

_PYTHON_EXE = re.compile(r"python(\d+\.\d+)")
_LIBPYTHON = re.compile(r"/libpython(\d+\.\d+)[^/\s]*\.so")
_FULL_VERSION = re.compile(r"(?<![\d.])(\d+\.\d+\.\d+)(?![\d.])")

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
# /proc/PID/stat's state letter in psutil's words (what ProcessSample.state has always carried).
STATES = {
    "R": psutil.STATUS_RUNNING, "S": psutil.STATUS_SLEEPING, "D": psutil.STATUS_DISK_SLEEP,
    "T": psutil.STATUS_STOPPED, "t": psutil.STATUS_TRACING_STOP, "Z": psutil.STATUS_ZOMBIE,
    "X": psutil.STATUS_DEAD, "x": psutil.STATUS_DEAD, "K": "wake-kill", "W": psutil.STATUS_WAKING,
    "I": psutil.STATUS_IDLE, "P": psutil.STATUS_PARKED,
}


@dataclass(frozen=True)
class ProcStat:
    """One read of /proc/PID/stat: what a tick needs of a process, in one file instead of psutil's five."""

    comm: str
    state: str  # psutil's word for the state letter
    ppid: int
    cpu_seconds: float  # user + system, all threads
    num_threads: int
    started: int  # clock ticks since boot: with the PID it names one process
    rss_bytes: int
    # Where the program's code and stack start: an exec maps a new program, so these move (with address-space
    # randomisation, even when it runs the same binary again; with it turned off, such an exec is seen at the
    # periodic re-read); None where the kernel masks them (0), and the command line is then read every tick.
    exec_mark: tuple[str, int, int, int] | None
    # Field 52 (Linux 3.5+): the exit status in waitpid's form, which a zombie keeps until its parent reaps it; 0 for
    # a live process, None where the kernel does not write it.
    exit_status: int | None = None
    # Field 12: page faults that waited for a read from disk (a file's page not in the cache, a page swapped out),
    # cumulative over the process's threads. A training loop whose memory stays resident takes none after warm-up.
    majflt: int | None = None


def read_stat(pid: int) -> ProcStat | None:
    """/proc/PID/stat parsed; None when the process is gone or the line is not what Linux writes."""
    text = read_text(f"/proc/{pid}/stat")
    if not text:
        return None
    head, _, tail = text.rpartition(")")  # comm may hold spaces and parentheses
    fields = tail.split()
    try:
        comm = head.partition("(")[2]
        start_code, end_code, start_stack = int(fields[23]), int(fields[24]), int(fields[25])
        return ProcStat(
            comm=comm,
            state=STATES.get(fields[0], fields[0]),
            ppid=int(fields[1]),
            cpu_seconds=(int(fields[11]) + int(fields[12])) / CLOCK_TICKS,
            num_threads=int(fields[17]),
            started=int(fields[19]),
            rss_bytes=int(fields[21]) * PAGE_BYTES,
            exec_mark=(comm, start_code, end_code, start_stack) if start_stack else None,
            exit_status=int(fields[49]) if len(fields) > 49 else None,
            majflt=int(fields[9]),
        )
    except (IndexError, ValueError):
        return None


def decode_wait_status(status: int) -> tuple[int | None, int | None, bool]:
    """(exit code, signal, core dumped) of a waitpid status: an exit code where the process exited, a signal where
    one ended it (what WIFEXITED/WEXITSTATUS and WIFSIGNALED/WTERMSIG/WCOREDUMP say)."""
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status), None, False
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status), os.WCOREDUMP(status)
    return None, None, False


# The wait channel of a task blocked in the kernel's wait4 for a child.
_WAIT_WCHAN = "do_wait"
# ... and of one blocked reading an empty pipe: anon_pipe_read on Linux 6.x, pipe_read before it, pipe_wait(_readable)
# on older kernels.
_PIPE_READ_WCHANS = frozenset({"anon_pipe_read", "pipe_read", "pipe_wait", "pipe_wait_readable"})
_PIPE_LINK = re.compile(r"pipe:\[(\d+)\]")


def main_thread_waits_for_child(pid: int, child_pids: Sequence[int]) -> bool:
    """Whether the process's main thread waits on one of its children: blocked in wait4 (a Python launcher's
    ``Popen.wait``), or blocked reading a pipe that a child writes as its stdout or stderr, the launcher relaying
    the child's output until it ends (``accelerate launch`` of one process since accelerate 1.16 copies its
    child's stderr on its main thread). /proc/PID/wchan is the main thread's; /proc/PID/syscall names the fd it
    reads where it may be read (the same permission py-spy needs), else any pipe it holds open for reading will do."""
    wchan = (read_text(f"/proc/{pid}/wchan") or "").strip()
    if wchan == _WAIT_WCHAN:
        return True
    if wchan not in _PIPE_READ_WCHANS or not child_pids:
        return False
    children_write = {inode for child in child_pids for fd in (1, 2) if (inode := _pipe_of(child, fd)) is not None}
    if not children_write:
        return False
    fd = _fd_in_syscall(pid)
    if fd is not None:
        return _pipe_of(pid, fd) in children_write
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    return any(_pipe_of(pid, int(fd)) in children_write for fd in fds if fd.isdigit())


def _pipe_of(pid: int, fd: int) -> int | None:
    """The pipe inode behind a process's fd, or None when it is no pipe (or cannot be read)."""
    try:
        match = _PIPE_LINK.fullmatch(os.readlink(f"/proc/{pid}/fd/{fd}"))
    except OSError:
        return None
    return int(match.group(1)) if match else None


def _fd_in_syscall(pid: int) -> int | None:
    """The first argument of the syscall the main thread is blocked in (the fd of a read), from /proc/PID/syscall
    ("NR ARG1 ARG2 ..."); None when it is not readable or the thread is not in a syscall."""
    fields = (read_text(f"/proc/{pid}/syscall") or "").split()
    if len(fields) < 2 or not fields[0].isdigit():
        return None
    try:
        return int(fields[1], 16)
    except ValueError:
        return None


def read_cmdline(pid: int) -> tuple[str, ...]:
    """/proc/PID/cmdline's arguments (empty for a zombie, a kernel thread, or when unreadable)."""
    text = read_text(f"/proc/{pid}/cmdline") or ""
    if not text:
        return ()
    # Split as psutil does: a process that rewrote its title (setproctitle) may leave one string with spaces.
    separator = "\0" if text.endswith("\0") else " "
    arguments = text.removesuffix(separator).split(separator)
    if separator == "\0" and len(arguments) == 1 and " " in arguments[0]:
        arguments = arguments[0].split(" ")
    return tuple(arguments)


@dataclass(frozen=True)
class MainThreadCounters:
    """Cumulative counters of a process's main thread (TID == PID): the thread whose silence means hung.

    Finer than the process's CPU%: schedstat counts CPU time in nanoseconds (a thread that wakes for a
    few microseconds per network chunk shows), and counting per thread keeps a background heartbeat
    thread from hiding a hang of the main one.
    """

    cpu_ns: int | None  # /proc/PID/task/PID/schedstat, first field
    runqueue_ns: int | None  # its second: time runnable but waiting for a CPU (others had them)
    voluntary_switches: int | None  # times it blocked and was woken (status: voluntary_ctxt_switches)
    involuntary_switches: int | None  # times it was preempted while runnable
    read_chars: int | None  # /proc/PID/task/PID/io rchar, wchar: this thread's read()/write() bytes
    write_chars: int | None


def main_thread_counters(pid: int) -> MainThreadCounters:
    task = f"/proc/{pid}/task/{pid}"
    schedstat = (read_text(f"{task}/schedstat") or "").split()
    status = picked_ints(read_text(f"{task}/status"), ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"))
    io = keyed_ints(read_text(f"{task}/io"), ":")
    return MainThreadCounters(
        cpu_ns=int(schedstat[0]) if schedstat and schedstat[0].isdigit() else None,
        runqueue_ns=int(schedstat[1]) if len(schedstat) > 1 and schedstat[1].isdigit() else None,
        voluntary_switches=status.get("voluntary_ctxt_switches"),
        involuntary_switches=status.get("nonvoluntary_ctxt_switches"),
        read_chars=io.get("rchar"),
        write_chars=io.get("wchar"),
    )


def picked_ints(text: str | None, keys: Sequence[str]) -> dict[str, int]:
    """{key: int} of the "key:<tab>123" lines named, found without splitting the whole file (status has ~60
    lines, read for each process each tick)."""
    values: dict[str, int] = {}
    if not text:
        return values
    for key in keys:
        at = text.find(f"\n{key}:")
        if at < 0:
            continue
        start = at + len(key) + 2
        end = text.find("\n", start)
        value = text[start:end if end >= 0 else None].strip()
        if value.isdigit():
            values[key] = int(value)
    return values


def keyed_ints(text: str | None, separator: str) -> dict[str, int]:
    """{key: int} from "key: 123" lines; lines whose value is not one integer are skipped."""
    values = {}
    for line in (text or "").splitlines():
        key, _, value = line.partition(separator)
        value = value.strip()
        if value.isdigit():
            values[key.strip()] = int(value)
    return values


@dataclass(frozen=True)
class TaskScan:
    """One pass over /proc/PID/task: thread states, the next level of the tree, the main thread's counters."""

    runnable: int
    disk_wait: int
    children: list[int]  # the main thread's children, and the other threads' when side_children is not None
    main_thread: MainThreadCounters
    stat: ProcStat  # /proc/PID/stat: the process, and its main thread's state
    side_children: list[int] | None = None  # the other threads' children; None: not read this time
    side_busy: bool | None = None  # any other thread R or D; None: their states were not read this time


def scan_tasks(pid: int, with_children: bool, side_children: bool = True,
               side_states: Callable[[ProcStat, MainThreadCounters], bool] | None = None) -> TaskScan | None:
    """Thread states, child PIDs and the main thread's counters from /proc/PID/task/*; None if it is gone.

    Children are listed per thread (a child belongs to the thread that forked it), so one pass over the
    threads gives both the thread states and the next level of the tree. The main thread's state is the one in
    /proc/PID/stat (read here once for the whole tick); ``side_children`` False leaves the other threads'
    children files unread; ``side_states``, given the process's stat and main thread's counters, False leaves
    the other threads' stat files unread (they count as neither R nor D: see proctree's SIDE_THREAD_STATES_S).
    """
    stat = read_stat(pid)
    if stat is None:
        return None
    main_thread = main_thread_counters(pid)
    runnable = int(stat.state == psutil.STATUS_RUNNING)
    disk_wait = int(stat.state == psutil.STATUS_DISK_SLEEP)
    children: list[int] = []
    if with_children:
        children.extend(int(c) for c in (read_text(f"/proc/{pid}/task/{pid}/children") or "").split())
    side: list[int] | None = [] if with_children and side_children else None
    read_states = side_states is None or side_states(stat, main_thread)
    if not read_states and side is None:
        return TaskScan(runnable, disk_wait, children, main_thread, stat, None, None)
    try:
        entries = list(os.scandir(f"/proc/{pid}/task"))
    except OSError:
        return None
    main = str(pid)
    side_busy = 0
    for entry in entries:
        if entry.name == main:
            continue
        if read_states:
            thread_stat = read_text(f"{entry.path}/stat")
            if not thread_stat:
                continue  # the thread ended between listing and reading
            # The state follows the ")" that closes comm; comm itself may contain spaces and parentheses.
            fields = thread_stat.rpartition(")")[2].split()
            state = fields[0] if fields else ""
            if state == "R":
                side_busy += 1
                runnable += 1
            elif state == "D":
                side_busy += 1
                disk_wait += 1
        if side is not None:
            side.extend(int(c) for c in (read_text(f"{entry.path}/children") or "").split())
    if side is not None:
        children.extend(side)
    return TaskScan(runnable, disk_wait, children, main_thread, stat, side, bool(side_busy) if read_states else None)


def python_version(exe: str | None, pid: int) -> str | None:
    """The version of a Python interpreter ("3.11.7", or "3.11" when only that shows), else None.

    Cheap on purpose: the interpreter's file name (python3.11) or the libpython it maps gives major.minor;
    a full version is taken from the same path when it carries one (pyenv's versions/3.11.7, uv's
    cpython-3.11.7-...), since reading the interpreter's memory would cost far more.
    """
    candidates = []
    if exe:
        match = _PYTHON_EXE.search(os.path.basename(exe))
        if match:
            candidates.append((match.group(1), exe))
    if not candidates:
        maps = read_text(f"/proc/{pid}/maps") or ""
        match = _LIBPYTHON.search(maps)
        if match:
            line_start = maps.rfind("\n", 0, match.start()) + 1
            path = maps[line_start : match.end()].split()[-1]
            candidates.append((match.group(1), path))
    if not candidates:
        return None
    major_minor, path = candidates[0]
    for full in _FULL_VERSION.findall(os.path.dirname(path)):
        if full.startswith(major_minor + "."):
            return full
    return major_minor


@dataclass
class PreviousRead:
    """What the last read of one process saw: the baseline for its CPU percent and I/O rates."""

    started: int  # /proc/PID/stat's start time (clock ticks since boot): with the PID it names one process
    at: float
    cpu_seconds: float | None
    io: tuple[int, ...] | None  # read_bytes, write_bytes, read_chars, write_chars
    main_thread: MainThreadCounters | None = None
    socket_bytes: dict[int, tuple[int, int]] | None = None  # {inode: (bytes received, bytes acked)}
    majflt: int | None = None  # /proc/PID/stat's major faults


def socket_byte_counts(sockets: list[TcpSocket] | None) -> dict[int, tuple[int, int]] | None:
    """{inode: (bytes received, bytes sent and acknowledged)}; None when there is no TCP socket to count."""
    if not sockets:
        return None
    return {s.inode: (s.bytes_received or 0, s.bytes_acked or 0) for s in sockets}


def socket_byte_rates(now: dict[int, tuple[int, int]] | None, before: dict[int, tuple[int, int]] | None,
                      elapsed: float) -> list[float | None]:
    """[received, sent] bytes per second, per socket: one opened since the last read counts from zero,
    and one that closed takes only what it had already counted (an HTTP client opens one per request)."""
    if now is None:
        return [None, None]
    before = before or {}
    received = sum(max(0, rx - before.get(inode, (0, 0))[0]) for inode, (rx, _) in now.items())
    sent = sum(max(0, tx - before.get(inode, (0, 0))[1]) for inode, (_, tx) in now.items())
    return [received / elapsed, sent / elapsed]


def main_thread_rates(now: MainThreadCounters, before: MainThreadCounters | None,
                      elapsed: float) -> dict[str, float | None]:
    """Per-second rates of the main thread's counters between two reads (None where either is missing)."""
    def rate(new: int | None, old: int | None, scale: float = 1.0) -> float | None:
        if before is None or new is None or old is None:
            return None
        return max(0, new - old) * scale / elapsed

    cpu = rate(now.cpu_ns, before.cpu_ns if before else None, 1e-9 * 100.0)
    runqueue = rate(now.runqueue_ns, before.runqueue_ns if before else None, 1e-9 * 100.0)
    return {
        "cpu_pct": round(cpu, 3) if cpu is not None else None,
        "runqueue_pct": round(runqueue, 3) if runqueue is not None else None,
        "wakeups_per_s": rate(now.voluntary_switches, before.voluntary_switches if before else None),
        "preemptions_per_s": rate(now.involuntary_switches, before.involuntary_switches if before else None),
        "read_chars_per_s": rate(now.read_chars, before.read_chars if before else None),
        "write_chars_per_s": rate(now.write_chars, before.write_chars if before else None),
    }


@dataclass(frozen=True)
class SmapsRollup:
    """One read of /proc/PID/smaps_rollup (Linux 4.14+): the process's memory split by whether other processes
    map the same pages. A forked DataLoader worker starts with its parent's pages shared; each one it writes to,
    Python's reference counts included, becomes its own (copy-on-write), moving bytes from shared to private."""

    rss_bytes: int
    pss_bytes: int  # each shared page divided among the processes that map it
    shared_clean_bytes: int
    shared_dirty_bytes: int
    private_clean_bytes: int
    private_dirty_bytes: int
    swap_bytes: int

    @property
    def private_bytes(self) -> int:
        return self.private_clean_bytes + self.private_dirty_bytes

    @property
    def shared_bytes(self) -> int:
        return self.shared_clean_bytes + self.shared_dirty_bytes


_SMAPS_FIELDS = ("Rss", "Pss", "Shared_Clean", "Shared_Dirty", "Private_Clean", "Private_Dirty", "Swap")


def parse_smaps_rollup(text: str | None) -> SmapsRollup | None:
    """smaps_rollup's text parsed (its figures are in kB); None when a field is missing."""
    values = keyed_ints((text or "").replace(" kB", ""), ":")
    if any(name not in values for name in _SMAPS_FIELDS):
        return None
    rss, pss, shared_clean, shared_dirty, private_clean, private_dirty, swap = (
        values[name] * 1024 for name in _SMAPS_FIELDS
    )
    return SmapsRollup(rss, pss, shared_clean, shared_dirty, private_clean, private_dirty, swap)


def read_smaps_rollup(pid: int) -> SmapsRollup | None:
    """/proc/PID/smaps_rollup; None when the process is gone, not ours to read (it takes ptrace's read access) or
    the kernel is older than 4.14. The kernel walks every mapping to write it (a few ms for a big process), so it is
    a read for the workers that are watched for copy-on-read, not for every process every tick."""
    return parse_smaps_rollup(read_text(f"/proc/{pid}/smaps_rollup"))
