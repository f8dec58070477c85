"""The target's process tree, read from /proc: who is in it, what role each plays, and what each costs (CPU,
threads by state, memory, I/O).

Per process a tick: its main thread's state, children and counters, one /proc/PID/stat and one /proc/PID/io; its
other threads' states when they can have changed (they used CPU, or one was R or D), else every
SIDE_THREAD_STATES_S (a thread that blocks in D is counted within that bound); a DataLoader worker's smaps_rollup
every SMAPS_EVERY_S (copy-on-read: its pages turning from shared to private); what rarely changes (the command
line, the socket inodes) is cached by PID and start time and read again when it may have changed (on a node's job
of 73 processes, psutil and the socket listing cost ~1 ms a process a tick). psutil is left for the root's
liveness and the target's static facts.

This module is the only one that walks /proc for the tree. It decides which of a process's files are read each
tick and keeps what was read between ticks; probes/sensors/proc_readers.py reads and parses them. One ``read()``
per tick: rates (CPU percent, I/O per second) are deltas against the previous read of the same process. When the
target exits, the last readings are kept and returned marked ``alive=False`` so the screen can show what it was
doing.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import psutil

from probes.frame import (
    ROLE_COMPILE_WORKER,
    ROLE_DATALOADER_WORKER,
    ROLE_FORKSERVER,
    ROLE_MAIN,
    ROLE_OTHER,
    ROLE_RESOURCE_TRACKER,
    ROLES,
    ProcessExit,
    ProcessSample,
    Role,
    TargetInfo,
)
from probes.sensors.proc_readers import (
    CLOCK_TICKS,
    MainThreadCounters,
    PreviousRead,
    ProcStat,
    SmapsRollup,
    TaskScan,
    keyed_ints,
    main_thread_rates,
    python_version,
    read_cmdline,
    read_smaps_rollup,
    scan_tasks,
    socket_byte_counts,
    socket_byte_rates,
)
from probes.sensors.process_exits import ExitWatch
from probes.sensors.tcpinfo import TCP_ESTABLISHED, SocketInodeCache, TcpSocket, read_tcp_sockets
from probes.sensors.textfiles import read_text

# torch names each DataLoader worker's main thread (and so /proc/PID/comm) this, in _worker_loop.
DATALOADER_WORKER_COMM = "pt_data_worker"
# Workers started through the forkserver inherit the forkserver's command line, so the comm check must
# come before these command-line checks.
_COMPILE_WORKER_MARKERS = ("torch/_inductor/compile_worker", "torch._inductor.compile_worker")
_FORKSERVER_MARKER = "from multiprocessing.forkserver import main"
_RESOURCE_TRACKER_MARKER = "multiprocessing.resource_tracker"

MAX_PEERS_LISTED = 4  # TCP peers named per process (a rank talks to a few; evidence needs one)


def target_exists(pid: int) -> bool:
    """True when `pid` names a running (not zombie) process we can see."""
    if pid <= 0:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def child_pids(pid: int) -> list[int]:
    """The direct children of `pid` (empty when it is gone or unreadable); for deciding, before the tree is
    watched, whether a process's parent is the launcher of a job."""
    me = os.getpid()
    if os.path.exists(f"/proc/{me}/task/{me}/children"):
        scan = scan_tasks(pid, with_children=True)
        return list(dict.fromkeys(scan.children)) if scan is not None else []
    try:
        return [child.pid for child in psutil.Process(pid).children()]
    except psutil.Error:
        return []


def parent_pid(pid: int) -> int | None:
    """The parent of `pid`, or None when it is gone or unreadable."""
    try:
        return psutil.Process(pid).ppid()
    except psutil.Error:
        return None


def process_started_at(pid: int) -> float | None:
    """When `pid` started, as Unix time; None when it is gone or unreadable. With the PID it names one process."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


@dataclass(frozen=True)
class NodeProcess:
    """One process of the whole machine, as `gputop serve --follow`'s census sees it."""

    pid: int
    ppid: int
    name: str  # /proc/PID/comm
    cmdline: tuple[str, ...]  # as read: not redacted, never stored or shown


def node_processes() -> dict[int, NodeProcess]:
    """Every process this user can see, by PID (kernel threads and PID 1 left out); never raises."""
    found = {}
    try:
        for process in psutil.process_iter(["pid", "ppid", "name", "cmdline"]):
            info = process.info
            if info["pid"] <= 1 or not info.get("cmdline"):  # kernel threads have no command line
                continue
            found[info["pid"]] = NodeProcess(info["pid"], info.get("ppid") or 0, info.get("name") or "",
                                             tuple(info["cmdline"]))
    except (psutil.Error, OSError):
        pass
    return found


def _nspids(pid: int | str) -> list[str] | None:
    """Its status's NSpid: its PID in each PID namespace from the procfs's down to its own; None when unknown."""
    status = read_text(f"/proc/{pid}/status")
    if status is None:
        return None
    return next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), None) or None


def _nspid_depth(pid: int | str) -> int | None:
    nspid = _nspids(pid)
    return len(nspid) if nspid else None


def is_pid_namespace_init(pid: int) -> bool:
    """Whether `pid` is an init: PID 1 of this machine's PID namespace or of a container's below it (its PID in
    its own namespace, NSpid's last, is 1). False when unknown."""
    nspid = _nspids(pid)
    return pid == 1 or (nspid is not None and nspid[-1] == "1")


def in_nested_pid_namespace(pid: int) -> bool:
    """Whether `pid` lives in a PID namespace below this process's own: a container's or a namespaced node's
    process that this machine's /proc shows but that is not this node's. Its status's NSpid lists one PID per
    namespace level from the procfs's down to its own; more levels than ours means nested. False when unknown."""
    theirs, ours = _nspid_depth(pid), _nspid_depth("self")
    return theirs is not None and ours is not None and theirs > ours


# A process's command line is read again at least this often (a process may rewrite its own title), and at once
# when it is new (PID and start time) or ran a new program (its exec mark moved).
PROGRAM_REREAD_S = 10.0


@dataclass(frozen=True)
class _Program:
    """A process's command line as last read, and what says whether it may have changed since."""

    started: int
    exec_mark: tuple[str, int, int, int] | None
    read_at: float
    raw: tuple[str, ...]
    redacted: tuple[str, ...]


# Children forked by a thread other than the main one (a helper thread starting a subprocess) are looked for this
# often; the main thread's every tick (DataLoader workers, ranks and a launcher's children are forked by it). A
# rank has ~12 threads and a worker 3: reading every thread's children file each tick was a fifth of the tick.
SIDE_THREAD_CHILDREN_S = 5.0


# The other threads' states (/proc/PID/task/TID/stat: each thread's R or D) are read when they can have changed in
# a way that counts, else at least this often. A thread that runs uses CPU: the process's CPU (stat) then grew by
# more than its main thread's (schedstat) since the last tick, and they are read. A thread left R or D at the last
# read is read again each tick until it is neither. A thread blocked in D uses no CPU: it is seen within this bound.
# On a node's job (73 processes, 291 threads) these reads were the largest part of the tree's walk (4 ms a tick).
SIDE_THREAD_STATES_S = 5.0
# The process's CPU counts whole clock ticks, its main thread's nanoseconds: other threads count as having run when
# the process's CPU grew by more than the main thread's plus one clock tick (a main thread alone never passes it).
SIDE_THREAD_CPU_SLACK_S = 1.0 / CLOCK_TICKS

# A DataLoader worker's /proc/PID/smaps_rollup (its private and shared bytes, for copy-on-read) is read at most this
# often: the kernel walks every mapping and page table of the process to write it, 15 to 30 ms for a worker holding
# 300 MB (measured here), which for a node's 32 workers each tick would be most of the tick. Every 5 s a 90 s
# growth window still holds 18 reads, and copy-on-read is claimed within a minute of it starting.
SMAPS_EVERY_S = 5.0


@dataclass(frozen=True)
class _SideThreadStates:
    """The other threads' states as last read: when, and whether any of them was R or D."""

    read_at: float
    busy: bool


# Environment variables worth showing beside a diagnosis: thread counts, devices, distributed setup,
# torch and tokenizer switches. Secret-looking ones among them are redacted by the caller's redact_environ.
ENVIRONMENT_PREFIXES = (
    "CUDA_", "NCCL_", "OMP_", "MKL_", "OPENBLAS_", "TORCH", "PYTORCH_", "NVIDIA_", "TOKENIZERS_",
    "HF_", "WANDB_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "PYTHONUNBUFFERED", "PYTHONOPTIMIZE",
)


class ProcessTreeProbe:
    """Reads the target and all its descendants once per call to read()."""

    def __init__(
        self,
        pid: int,
        redact: Callable[[Sequence[str]], tuple[str, ...]] = tuple,
        redact_environ: Callable[[Mapping[str, str]], dict[str, str]] = dict,
    ) -> None:
        self.pid = pid
        self._redact = redact
        self._redact_environ = redact_environ
        self._root: psutil.Process | None = None
        self._target_static: TargetInfo | None = None  # cmdline, exe, python_version: read again after an exec
        self._previous: dict[int, PreviousRead] = {}
        self._last_samples: tuple[ProcessSample, ...] = ()
        self._tree_pids: tuple[int, ...] = ()
        self._started: dict[int, int] = {}  # each process's start time as this tick's read found it
        self._exited_at: float | None = None
        self._exit_reason: str | None = None
        self._exits = ExitWatch(pid)  # the tree's processes that ended, and how
        # /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN) walks only the tree; without it psutil
        # finds children by reading every process's stat, a cost that grows with the whole host.
        me = os.getpid()
        self._children_files = os.path.exists(f"/proc/{me}/task/{me}/children")
        self._sock_diag_works = True
        self._socket_inodes = SocketInodeCache()
        self._programs: dict[int, _Program] = {}  # command lines, read again only when they may have changed
        # {pid: (when read, children of its threads other than the main one)}, read every SIDE_THREAD_CHILDREN_S
        self._side_children: dict[int, tuple[float, list[int]]] = {}
        # {pid: its other threads' states as last read}: read again when due (SIDE_THREAD_STATES_S)
        self._side_states: dict[int, _SideThreadStates] = {}
        self._smaps_read: dict[int, tuple[int, float]] = {}  # {worker pid: (its start time, when last read)}
        try:
            self._root = psutil.Process(pid)
        except psutil.NoSuchProcess:
            self._mark_exited("no such process")
        except psutil.Error as error:
            self._mark_exited(f"cannot read the process: {error}")

    # --- public -----------------------------------------------------------------------------------

    def read(
        self, role_hints: Mapping[int, Role] | None = None
    ) -> tuple[TargetInfo, tuple[ProcessSample, ...]]:
        """The target and its process tree now. Never raises."""
        self._started = {}
        try:
            return self._read(role_hints or {})
        except Exception:
            self._started = {}
            return self._target_info(alive=self._exited_at is None), self._last_samples

    def exits(self) -> tuple[ProcessExit, ...]:
        """The processes of the tree (the target among them) that ended since the last call, each once, with its
        exit status or signal where /proc still held it (a zombie's stat), else why not."""
        return self._exits.take()

    def started_ticks(self) -> dict[int, int]:
        """{pid: /proc/PID/stat's start time (clock ticks since boot)} of each process the last read() read this
        time (none when it returned an earlier tick's samples): the job tracker keys its per-process facts on it
        without reading every stat again."""
        return dict(self._started)

    def pid_aliases(self) -> dict[int, int]:
        """{PID as NVML may report it: our PID} for every process of the tree (as of the last read).

        NVML reports PIDs in the host's namespace. The first NSpid field of /proc/PID/status is the PID
        in the namespace of the procfs being read: the host PID when that /proc is the host's. Inside a
        container with its own /proc the host PID appears nowhere in /proc, so it cannot be mapped here.
        """
        pids = self._tree_pids or self._list_tree_pids()
        aliases: dict[int, int] = {}
        for pid in pids:
            status = read_text(f"/proc/{pid}/status") or ""
            nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
            if nspid and nspid[0].isdigit():
                aliases.setdefault(int(nspid[0]), pid)
        aliases.update({pid: pid for pid in pids})  # our own PIDs win any collision
        return aliases

    # --- reading ----------------------------------------------------------------------------------

    def _read(self, role_hints: Mapping[int, Role]) -> tuple[TargetInfo, tuple[ProcessSample, ...]]:
        if self._exited_at is None and not self._root_running():
            self._mark_exited(self._exit_reason or "process ended")
        if self._exited_at is not None:
            return self._target_info(alive=False), self._last_samples

        tree = self._walk_tree()
        now = time.monotonic()
        samples = []
        seen = set()
        sockets = self._tcp_sockets([(pid, scan.stat.started) for pid, scan in tree])
        for pid, scan in tree:
            sample = self._sample(pid, now, role_hints, scan, sockets.get(pid))
            if sample is not None:
                samples.append(sample)
                seen.add(sample.pid)
                self._started[pid] = scan.stat.started
        self._exits.note_tick([(pid, scan.stat) for pid, scan in tree], samples, self._last_samples, self._previous,
                              seen)
        for gone in set(self._previous) - seen:
            if not os.path.exists(f"/proc/{gone}"):  # a child only missed this once keeps its baseline
                del self._previous[gone]
        self._programs = {pid: program for pid, program in self._programs.items() if pid in seen}
        self._side_children = {pid: known for pid, known in self._side_children.items() if pid in seen}
        self._side_states = {pid: known for pid, known in self._side_states.items() if pid in seen}
        self._smaps_read = {pid: known for pid, known in self._smaps_read.items() if pid in seen}
        self._socket_inodes.keep_only(seen)

        if self.pid not in seen:  # the target died while we read it
            self._started = {}
            self._mark_exited("process ended")
            return self._target_info(alive=False), self._last_samples
        self._last_samples = tuple(samples)
        self._tree_pids = tuple(seen)
        return self._target_info(alive=True), self._last_samples

    def _root_running(self) -> bool:
        if self._root is None:
            return False
        try:
            # is_running() compares create times, so a PID reused by another process counts as gone.
            if not self._root.is_running():
                self._exit_reason = (
                    "process ended (its PID now belongs to another process)"
                    if psutil.pid_exists(self.pid)
                    else "process ended"
                )
                return False
            if self._root.status() == psutil.STATUS_ZOMBIE:
                self._exit_reason = "process ended (zombie, not yet reaped by its parent)"
                return False
        except psutil.NoSuchProcess:
            self._exit_reason = "process ended"
            return False
        except psutil.Error:
            return True  # unreadable is not gone; the sample below will show what can be read
        return True

    def _walk_tree(self) -> list[tuple[int, TaskScan]]:
        """(pid, its task scan) for the target and every descendant, parents first."""
        found = []
        if self._children_files:
            queue: list[tuple[int, int | None]] = [(self.pid, None)]  # (pid, its parent's)
            queued = {self.pid}
            now = time.monotonic()
            while queue:
                pid, parent = queue.pop(0)
                known = self._side_children.get(pid)
                due = known is None or now - known[0] >= SIDE_THREAD_CHILDREN_S
                scan = scan_tasks(pid, with_children=True, side_children=due,
                                  side_states=self._side_states_due(pid, now))
                if scan is None or (parent is not None and scan.stat.ppid != parent):
                    # gone since its parent listed it; or a side child remembered from an earlier tick that has
                    # ended since, its PID now another process's
                    continue
                found.append((pid, scan))
                self._note_side_states(pid, scan, now)
                children = scan.children
                if scan.side_children is not None:
                    self._side_children[pid] = (now, scan.side_children)
                elif known is not None:
                    children = [*children, *known[1]]
                for child in children:
                    if child not in queued:
                        queued.add(child)
                        queue.append((child, pid))
            return found
        assert self._root is not None
        try:
            pids = [self.pid, *(child.pid for child in self._root.children(recursive=True))]
        except psutil.Error:
            pids = [self.pid]
        now = time.monotonic()
        for pid in pids:
            scan = scan_tasks(pid, with_children=False, side_states=self._side_states_due(pid, now))
            if scan is not None:
                found.append((pid, scan))
                self._note_side_states(pid, scan, now)
        return found

    def _side_states_due(self, pid: int, now: float) -> Callable[[ProcStat, MainThreadCounters], bool]:
        """Whether ``pid``'s other threads' states are read this tick, given its stat and main thread's counters
        just read (see SIDE_THREAD_STATES_S): when never read, a thread was R or D then, the bound has passed,
        or its threads other than the main one used CPU since the last tick (or that cannot be told)."""
        def due(stat: ProcStat, main: MainThreadCounters) -> bool:
            known = self._side_states.get(pid)
            if known is None or known.busy or now - known.read_at >= SIDE_THREAD_STATES_S:
                return True
            if stat.num_threads <= 1:
                return False  # no other thread
            previous = self._previous.get(pid)
            if (previous is None or previous.started != stat.started or previous.cpu_seconds is None
                    or previous.main_thread is None or previous.main_thread.cpu_ns is None or main.cpu_ns is None):
                return True
            others_s = (stat.cpu_seconds - previous.cpu_seconds) - (main.cpu_ns - previous.main_thread.cpu_ns) / 1e9
            return others_s > SIDE_THREAD_CPU_SLACK_S
        return due

    def _note_side_states(self, pid: int, scan: TaskScan, now: float) -> None:
        if scan.side_busy is not None:
            self._side_states[pid] = _SideThreadStates(now, scan.side_busy)

    def _list_tree_pids(self) -> tuple[int, ...]:
        if self._root is None or self._exited_at is not None:
            return ()
        return tuple(pid for pid, _ in self._walk_tree())

    def _tcp_sockets(self, processes: Sequence[tuple[int, int]]) -> dict[int, list[TcpSocket]]:
        """{pid: its TCP sockets with the kernel's byte counters}, one sock_diag dump for the whole tree.
        processes: (pid, start time); each one's socket inodes come from the cache, listed again when its table
        may have changed."""
        inodes = {pid: self._socket_inodes.inodes(pid, started) for pid, started in processes}
        wanted = set().union(*inodes.values()) if inodes else set()
        if not wanted or not self._sock_diag_works:
            return {}
        found = read_tcp_sockets(wanted)
        if found is None:
            self._sock_diag_works = False  # not here (permissions, sandbox): stop asking every tick
            return {}
        by_inode = {s.inode: s for s in found}
        return {pid: [by_inode[i] for i in owned if i in by_inode] for pid, owned in inodes.items()}

    def _program(self, pid: int, stat: ProcStat, now: float) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(raw, redacted) command line of the process: from the cache while it cannot have changed."""
        if stat.state == psutil.STATUS_ZOMBIE:
            # A zombie has no command line left, but it must stay in the tree: a dead producer whose queue
            # the main thread waits on is evidence.
            return (), ()
        known = self._programs.get(pid)
        if (known is not None and known.started == stat.started and known.exec_mark is not None
                and known.exec_mark == stat.exec_mark and now - known.read_at < PROGRAM_REREAD_S):
            return known.raw, known.redacted
        raw = read_cmdline(pid)
        redacted = known.redacted if known is not None and known.raw == raw else self._redact(raw)
        if raw:  # empty: a process between fork and exec, or one that just ended; read again next tick
            self._programs[pid] = _Program(stat.started, stat.exec_mark, now, raw, redacted)
        return raw, redacted

    def _sample(
        self, pid: int, now: float, role_hints: Mapping[int, Role], scan: TaskScan,
        sockets: list[TcpSocket] | None,
    ) -> ProcessSample | None:
        # One read of /proc/PID/stat (the task scan's) and one of /proc/PID/io: psutil would read stat, status,
        # statm, io and cmdline, and stat again to check the PID was not reused.
        stat = scan.stat
        ppid = stat.ppid
        state = stat.state
        comm = stat.comm
        raw_cmdline, cmdline = self._program(pid, stat, now)
        cpu_seconds = stat.cpu_seconds
        num_threads = stat.num_threads
        io = keyed_ints(read_text(f"/proc/{pid}/io"), ":")  # denied for another user's process: no I/O rates
        io_keys = ("read_bytes", "write_bytes", "rchar", "wchar")
        io_tuple = tuple(io[k] for k in io_keys) if all(k in io for k in io_keys) else None
        previous = self._previous.get(pid)
        if previous is not None and previous.started != stat.started:
            previous = None  # same PID, different process
        thread = scan.main_thread
        socket_bytes = socket_byte_counts(sockets)
        self._previous[pid] = PreviousRead(stat.started, now, cpu_seconds, io_tuple, thread, socket_bytes,
                                           stat.majflt)

        cpu_pct = None
        rates: list[float | None] = [None, None, None, None]
        thread_rates: dict[str, float | None] = {}
        socket_rates: list[float | None] = [None, None]
        major_faults = None
        if previous is not None and now > previous.at:
            elapsed = now - previous.at
            if cpu_seconds is not None and previous.cpu_seconds is not None:
                cpu_pct = round(max(0.0, cpu_seconds - previous.cpu_seconds) / elapsed * 100.0, 1)
            if io_tuple is not None and previous.io is not None:
                rates = [max(0, new - old) / elapsed for new, old in zip(io_tuple, previous.io, strict=True)]
            thread_rates = main_thread_rates(thread, previous.main_thread, elapsed)
            socket_rates = socket_byte_rates(socket_bytes, previous.socket_bytes, elapsed)
            if stat.majflt is not None and previous.majflt is not None:
                major_faults = max(0, stat.majflt - previous.majflt) / elapsed
        role = self._role(pid, comm, raw_cmdline, role_hints)
        rollup = _due_smaps_rollup(self._smaps_read, pid, stat, now) if role == ROLE_DATALOADER_WORKER else None
        established = [s for s in sockets or () if s.state == TCP_ESTABLISHED]
        silent = [s.last_data_recv_s for s in established if s.last_data_recv_s is not None]

        return ProcessSample(
            pid=pid,
            ppid=ppid,
            role=role,
            name=comm,
            cmdline=cmdline,
            state=state,
            alive=state != psutil.STATUS_ZOMBIE,
            cpu_pct=cpu_pct,
            cpu_seconds=cpu_seconds,
            num_threads=num_threads,
            runnable_threads=scan.runnable,
            disk_wait_threads=scan.disk_wait,
            rss_bytes=stat.rss_bytes,
            read_bytes_per_s=rates[0],
            write_bytes_per_s=rates[1],
            read_chars_per_s=rates[2],
            write_chars_per_s=rates[3],
            main_thread_cpu_pct=thread_rates.get("cpu_pct"),
            main_thread_runqueue_pct=thread_rates.get("runqueue_pct"),
            main_thread_wakeups_per_s=thread_rates.get("wakeups_per_s"),
            main_thread_preemptions_per_s=thread_rates.get("preemptions_per_s"),
            main_thread_read_chars_per_s=thread_rates.get("read_chars_per_s"),
            main_thread_write_chars_per_s=thread_rates.get("write_chars_per_s"),
            tcp_received_per_s=socket_rates[0],
            tcp_sent_per_s=socket_rates[1],
            tcp_peers=tuple(sorted({s.peer for s in established}))[:MAX_PEERS_LISTED],
            tcp_last_data_recv_s=min(silent) if silent else None,
            major_faults_per_s=major_faults,
            private_bytes=rollup.private_bytes if rollup is not None else None,
            shared_bytes=rollup.shared_bytes if rollup is not None else None,
        )

    def _role(self, pid: int, comm: str, cmdline: tuple[str, ...], role_hints: Mapping[int, Role]) -> Role:
        if pid == self.pid:
            return ROLE_MAIN
        if comm == DATALOADER_WORKER_COMM:
            return ROLE_DATALOADER_WORKER
        hint = role_hints.get(pid)
        if hint in ROLES and hint != ROLE_MAIN:
            return hint
        joined = " ".join(cmdline)
        if any(marker in joined for marker in _COMPILE_WORKER_MARKERS):
            return ROLE_COMPILE_WORKER
        if _FORKSERVER_MARKER in joined:
            return ROLE_FORKSERVER
        if _RESOURCE_TRACKER_MARKER in joined:
            return ROLE_RESOURCE_TRACKER
        return ROLE_OTHER

    # --- target -----------------------------------------------------------------------------------

    def _mark_exited(self, reason: str | None) -> None:
        if self._exited_at is None:
            self._exits.note_target_ended(self._last_samples, self._previous)
            self._exited_at = time.time()
            self._exit_reason = reason
            self._last_samples = tuple(dataclasses.replace(s, alive=False) for s in self._last_samples)
            self._tree_pids = ()
            self._previous.clear()

    def _target_info(self, alive: bool) -> TargetInfo:
        static = self._target_static
        if alive and self._root is not None and (static is None or self._ran_new_program(static)):
            static = self._target_static = self._read_static()
        return TargetInfo(
            pid=self.pid,
            alive=alive,
            cmdline=static.cmdline if static else (),
            exe=static.exe if static else None,
            python_version=static.python_version if static else None,
            environment=static.environment if static else None,
            exited_at=None if alive else self._exited_at,
            exit_reason=None if alive else self._exit_reason,
        )

    def _ran_new_program(self, static: TargetInfo) -> bool:
        """Whether the target's command line (read each tick with its sample) differs from the one its
        static info was read with: it ran a new program (exec keeps the PID), so read them again."""
        root = next((s for s in self._last_samples if s.pid == self.pid), None)
        return root is not None and bool(root.cmdline) and root.cmdline != static.cmdline

    def _read_static(self) -> TargetInfo | None:
        assert self._root is not None
        try:
            # A fresh handle, as psutil caches exe() and an exec changes it; the same process, not a
            # new owner of the PID.
            proc = psutil.Process(self.pid)
            if proc != self._root:
                return None
            cmdline = self._redact(tuple(proc.cmdline()))
        except psutil.Error:
            return None
        exe = _or_none(proc.exe) or None
        environ = _or_none(proc.environ)
        environment = None
        if isinstance(environ, dict):
            relevant = {k: v for k, v in environ.items() if k.startswith(ENVIRONMENT_PREFIXES)}
            environment = self._redact_environ(dict(sorted(relevant.items())))
        return TargetInfo(
            pid=self.pid,
            alive=True,
            cmdline=cmdline,
            exe=exe,
            python_version=python_version(exe, self.pid),
            environment=environment,
        )


def _due_smaps_rollup(read_at: dict[int, tuple[int, float]], pid: int, stat: ProcStat,
                      now: float) -> SmapsRollup | None:
    """A DataLoader worker's smaps_rollup where SMAPS_EVERY_S has passed since its last read (`read_at`: {pid: (its
    start time, when last read)}, updated here), else None."""
    if stat.state == psutil.STATUS_ZOMBIE:
        return None
    known = read_at.get(pid)
    if known is not None and known[0] == stat.started and now - known[1] < SMAPS_EVERY_S:
        return None
    read_at[pid] = (stat.started, now)
    return read_smaps_rollup(pid)


def _or_none(read: Callable[[], object]):
    """One psutil read, or None when that one value is denied or unsupported (the process may be fine)."""
    try:
        return read()
    except (psutil.AccessDenied, psutil.ZombieProcess, NotImplementedError, OSError):
        return None


def ancestors(pid: int, parent_of: Mapping[int, int | None], top: int | None = None) -> list[int]:
    """Strict ancestors of `pid` that `parent_of` ({pid: parent pid}) holds, nearest first, up to and
    including `top` when it is one of them."""
    chain: list[int] = []
    current = pid
    while current in parent_of and current != top:
        parent = parent_of[current]
        if parent is None or parent not in parent_of or parent in chain:
            break
        chain.append(parent)
        current = parent
    return chain
