"""The py-spy binary: the only module that starts it.

It owns finding py-spy and its version, each py-spy child (:class:`PyspyRun`: started with ``posix_spawn`` and
reaped with ``wait4`` so that its CPU time is known), the set of a sampler's children and their CPU cost
(:class:`PyspyChildren`), a record window's two children started together (:class:`RecordPair`), the command line
of each kind of run the sampler starts (a record window's two halves, a dump, a GIL window), what a failed run
means in words a person can act on (:func:`explain_failure`), the one dump `gputop doctor` asks for
(:func:`dump_once`) and the user's own profile (:class:`ProfileRecording`). When and for which process each run
starts is probes/sampling/process_sampler.py's business; reading what py-spy wrote is
probes/sampling/pyspy_output.py's.

py-spy runs ``--nonblocking`` by default: its blocking mode pauses the target on every sample and can
slow a torch process with many threads 5-15x (py-spy issue 872). ``--native`` cannot be combined
with ``--nonblocking``, so native sampling is blocking (dumps stay nonblocking: they are never native).
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import psutil

from probes.sampling.pyspy_output import parse_dump
from probes.sensors.textfiles import read_text

MAX_BACKOFF_S = 30.0
DUMP_TIMEOUT_S = 15.0
PTRACE_SCOPE_PATH = "/proc/sys/kernel/yama/ptrace_scope"
# A record run prints this line once it samples (then nothing until its end): its moment is the window's first sample.
SAMPLING_LINE = b"py-spy> Sampling process"
SAMPLING_LINE_MAX_BYTES = 200
# How often a record window's wait looks for that line while it has not come: the error on the moment, at most.
SAMPLING_START_POLL_S = 0.05

# What a failed py-spy run means (explain_failure's kinds).
FAILURE_EXITED = "exited"
FAILURE_PERMISSION = "permission"
FAILURE_NOT_PYTHON = "not_python"
FAILURE_OTHER = "other"


def find_pyspy() -> str | None:
    """The py-spy beside the running interpreter (same bin dir) first, then the one on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def pyspy_version(path: str) -> str | None:
    """'0.4.3' from ``py-spy --version``, or None when it cannot be run."""
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"(\d+\.\d+[\w.\-]*)", out)
    return match.group(1) if match else None


def install_hint() -> str:
    return f"install it with: {sys.executable} -m pip install py-spy"


# --- explaining failures ---------------------------------------------------------------------------


def ptrace_scope() -> str | None:
    try:
        return Path(PTRACE_SCOPE_PATH).read_text().strip()
    except OSError:
        return None


def permission_reason(pid: int) -> str:
    scope = ptrace_scope()
    if scope is None:
        scope_note = "kernel.yama.ptrace_scope is not set here (no Yama)"
    elif scope == "0":
        scope_note = "kernel.yama.ptrace_scope is 0"
    else:
        scope_note = (
            f"kernel.yama.ptrace_scope is {scope}, which lets only root (or a parent) attach; "
            "`sysctl kernel.yama.ptrace_scope=0` lifts that"
        )
    if _runs_as_our_user(pid):
        # Same user, yet denied: the kernel then wants CAP_SYS_PTRACE, whatever the user.
        return (
            f"py-spy may not read PID {pid}: permission denied, though it runs as gputop's user: it is "
            "non-dumpable (prctl PR_SET_DUMPABLE 0, or it changed user or group) or holds capabilities "
            "gputop lacks. Run gputop as root with CAP_SYS_PTRACE; in Docker start the container with "
            f"--cap-add SYS_PTRACE; {scope_note}"
        )
    return (
        f"py-spy may not read PID {pid}: permission denied. Run gputop as the target's user or as root; "
        f"in Docker start the container with --cap-add SYS_PTRACE; {scope_note}"
    )


def _runs_as_our_user(pid: int) -> bool:
    """Whether every uid of ``pid`` (real, effective, saved: /proc/PID/status, readable by anyone) is ours."""
    try:
        uids = psutil.Process(pid).uids()
    except psutil.Error:
        return False
    return set(uids) == {os.geteuid()}


def process_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def explain_failure(pid: int, output: str) -> tuple[str, str]:
    """(kind, reason a person can act on) for a py-spy run that failed on ``pid``."""
    if process_gone(pid):
        return FAILURE_EXITED, f"PID {pid} exited"
    lowered = output.lower()
    if "permission denied" in lowered or "operation not permitted" in lowered or "(os error 1)" in lowered:
        return FAILURE_PERMISSION, permission_reason(pid)
    if "failed to find python version" in lowered or "failed to find a python interpreter" in lowered:
        return FAILURE_NOT_PYTHON, f"PID {pid} is not a Python process (py-spy found no interpreter)"
    error_lines = [line.strip() for line in output.splitlines() if line.strip().startswith("Error:")]
    other_lines = [line.strip() for line in output.splitlines() if line.strip()]
    detail = (error_lines or other_lines or ["no output"])[-1]
    return FAILURE_OTHER, f"py-spy failed on PID {pid}: {detail[:200]}"


@dataclass(frozen=True)
class DumpCheck:
    """The outcome of one real ``py-spy dump`` of a process (gputop doctor): whether py-spy can read it."""

    ok: bool
    kind: str | None = None  # on failure: "permission", "not_python", "exited", "other", "missing"
    reason: str | None = None  # on failure: what happened and the fix, one line
    threads: int = 0  # threads in the dump when it worked


def dump_once(pid: int, pyspy_path: str | None = None, timeout_s: float = DUMP_TIMEOUT_S) -> DumpCheck:
    """Run ``py-spy dump --json --nonblocking`` on ``pid`` once and say whether it could read it. Never raises."""
    path = pyspy_path or find_pyspy()
    if path is None:
        return DumpCheck(ok=False, kind="missing", reason=f"py-spy is not installed; {install_hint()}")
    try:
        result = subprocess.run([path, "dump", "--pid", str(pid), "--json", "--nonblocking"],
                                capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return DumpCheck(ok=False, kind=FAILURE_OTHER,
                         reason=f"py-spy dump of PID {pid} did not finish within {timeout_s:g} s")
    except OSError as exc:
        return DumpCheck(ok=False, kind=FAILURE_OTHER, reason=f"py-spy could not be run: {exc.strerror or exc}")
    if result.returncode == 0:
        try:
            threads = parse_dump(result.stdout, pid)
        except Exception:  # an output this version cannot read is still a dump that worked
            threads = []
        return DumpCheck(ok=True, threads=len(threads))
    kind, reason = explain_failure(pid, result.stderr + "\n" + result.stdout)
    return DumpCheck(ok=False, kind=kind, reason=reason)


# --- the children ---------------------------------------------------------------------------------


class PyspyRun:
    """One py-spy child, started with posix_spawn and reaped with wait4 so its CPU time is known.

    ``signal`` may be called from another thread: the lock makes sure a reaped pid (which the kernel
    may hand to some other process) is never signalled.
    """

    def __init__(self, target_pid: int, argv: list[str], stdout_path: str, stderr_path: str | None) -> None:
        self.target_pid = target_pid
        self._lock = threading.Lock()
        self.returncode: int | None = None
        self.cpu_seconds = 0.0
        self.signalled = False  # gputop itself sent it a signal (a window's end, close)
        self.cut = False  # a record window ended early because the picture may have moved
        self.ended: float | None = None  # time.monotonic() when it was seen to have exited
        self.stdout_path = stdout_path
        # time.monotonic() of its first sample, for a record (note_sampling_start); None until seen, or where its
        # output showed something else first (`sampling_read` then says to stop looking)
        self.sampling_from: float | None = None
        self.sampling_read = False
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        actions: list[tuple[int | str, ...]] = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, stdout_path, flags, 0o600),
        ]
        if stderr_path is None:
            actions.append((os.POSIX_SPAWN_DUP2, 1, 2))
        else:
            actions.append((os.POSIX_SPAWN_OPEN, 2, stderr_path, flags, 0o600))
        env = dict(os.environ, RUST_BACKTRACE="0")  # one-line errors instead of backtraces
        self.pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
        try:
            self._pidfd: int | None = os.pidfd_open(self.pid)
        except (AttributeError, OSError):  # kernels before 5.3: poll instead
            self._pidfd = None

    @property
    def running(self) -> bool:
        return self.returncode is None

    @property
    def killed_by(self) -> str | None:
        """The signal's name when something other than gputop killed the child, else None."""
        if self.returncode is None or self.returncode >= 0 or self.signalled:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    def wait(self, timeout: float, interrupt_fd: int | None = None) -> bool:
        """Wait up to ``timeout`` seconds; True once the child has exited and been reaped. Returns False early
        when ``interrupt_fd`` (a pipe a wake writes to) becomes readable."""
        deadline = time.monotonic() + timeout
        extra = [interrupt_fd] if interrupt_fd is not None else []
        while self.returncode is None:
            remaining = deadline - time.monotonic()
            pidfd = self._pidfd
            if pidfd is not None:
                ready, _, _ = select.select([pidfd, *extra], [], [], max(remaining, 0.0))
                if pidfd in ready:
                    self._reap(block=True)
                elif ready or remaining <= 0:
                    return False
            else:
                self._reap(block=False)
                if self.returncode is None:
                    if remaining <= 0:
                        return False
                    ready, _, _ = select.select(extra, [], [], min(0.1, remaining))
                    if ready:
                        return False
        return True

    def note_sampling_start(self) -> None:
        """Note when this record run began to sample, if it has and it is not known yet. py-spy prints "Sampling
        process ..." once it has attached and read the interpreter (a second or more on a crowded machine, seen up
        to 3 s) and writes nothing more until its end, so the file's mtime while it holds that one line is when
        sampling began; once the end's line is written too the moment is lost, and it stays None. Whatever the
        output holds first settles it (`sampling_read`): an error, another py-spy's words, or the line."""
        if self.sampling_read:
            return
        try:
            with open(self.stdout_path, "rb") as handle:
                stat = os.fstat(handle.fileno())
                head = handle.read(SAMPLING_LINE_MAX_BYTES + 1)
        except OSError:
            return
        if not head.endswith(b"\n") and len(head) <= SAMPLING_LINE_MAX_BYTES:
            return  # still attaching, or a short line not yet whole
        self.sampling_read = True
        # The line and the blank line py-spy prints after it, nothing more yet.
        if head.startswith(SAMPLING_LINE) and b"\n" not in head.rstrip(b"\n") and len(head) <= SAMPLING_LINE_MAX_BYTES:
            self.sampling_from = time.monotonic() - max(0.0, time.time() - stat.st_mtime)

    def _reap(self, block: bool) -> None:
        with self._lock:
            if self.returncode is not None:
                return
            try:
                pid, status, usage = os.wait4(self.pid, 0 if block else os.WNOHANG)
            except ChildProcessError:  # someone else reaped it; its CPU time is lost
                pid, status, usage = self.pid, 0, None
            if pid == 0:
                return
            self.returncode = os.waitstatus_to_exitcode(status)
            self.ended = time.monotonic()
            if usage is not None:
                self.cpu_seconds = usage.ru_utime + usage.ru_stime
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None

    def signal(self, sig: int) -> None:
        with self._lock:
            if self.returncode is None:
                self.signalled = True
                try:
                    os.kill(self.pid, sig)
                except ProcessLookupError:
                    pass

    def live_cpu_seconds(self) -> float:
        """CPU used so far: from wait4 once reaped, from /proc while running."""
        with self._lock:
            if self.returncode is not None:
                return self.cpu_seconds
            try:
                times = psutil.Process(self.pid).cpu_times()
            except psutil.Error:
                return 0.0
            return times.user + times.system

    def kill_and_reap(self) -> None:
        self.signal(signal.SIGKILL)
        self.wait(5.0)


class RecordPair:
    """One record window: two py-spy children started together with the same rate and duration, ``every`` with
    ``--idle`` (every thread in every sample) and ``active`` without it (only the samples in which py-spy found the
    thread active). py-spy's raw output carries no per-sample active flag, so the pair measures it: per stack, the
    working samples are ``active``'s count and the waiting ones ``every``'s less that
    (probes/sampling/pyspy_output.split_by_activity). Measured on a line that works 20% then 80% of each 100 ms
    cycle: the waiting share within 0.03 of the target's own log over every 5 s window at 200 Hz, quiet and beside
    two busy processes; at the default rates the second half costs about 0.1 CPU-second a minute on a one-thread
    target, more with many threads (docs/benchmarks.md). Both take the same number of samples
    (rate x duration, at exponentially spaced times), so a window that runs to its end compares like with like;
    one a wake ends early gets SIGINT in both at once, and their counts then agree within the noise of their
    random spacing (the split clamps a stack's waiting samples at 0).

    It offers what the sampler asks of one child (wait, signal, cut, kill_and_reap), for both; the window's fate
    (``returncode``, ``killed_by``) is ``every``'s, and ``active`` (None when it could not start: ``active_error``)
    is read beside it."""

    def __init__(self, every: PyspyRun, active: PyspyRun | None, active_error: str | None = None) -> None:
        self.every = every
        self.active = active
        self.active_error = active_error

    @property
    def runs(self) -> tuple[PyspyRun, ...]:
        return (self.every,) if self.active is None else (self.every, self.active)

    @property
    def target_pid(self) -> int:
        return self.every.target_pid

    @property
    def cut(self) -> bool:
        return self.every.cut

    @cut.setter
    def cut(self, value: bool) -> None:
        for run in self.runs:
            run.cut = value

    @property
    def running(self) -> bool:
        return any(run.running for run in self.runs)

    @property
    def returncode(self) -> int | None:
        return self.every.returncode

    @property
    def killed_by(self) -> str | None:
        return self.every.killed_by

    @property
    def cpu_seconds(self) -> float:
        return sum(run.cpu_seconds for run in self.runs)

    @property
    def ended(self) -> float | None:
        """When the window's samples end (time.monotonic()): the active half's end, where it ran. Each half takes its
        set number of samples at random moments and so ends at its own time (under load they drift apart by most of
        a second); a thread's working share is the active half's count over that set number (``every`` holds a
        live thread in each of its samples), so it measures the active half's span, and the window is that span:
        timed at the halves' midpoint, a window holding a change of phase read 0.335 waiting against 0.439 over it."""
        active = self.active.ended if self.active is not None else None
        return active if active is not None else self.every.ended

    @property
    def sampling_from(self) -> float | None:
        """When the window's samples begin (time.monotonic()): the active half's first sample, as ``ended`` is its
        last; None where it was not seen (a recording's window then counts from its start)."""
        return self.active.sampling_from if self.active is not None else self.every.sampling_from

    def wait(self, timeout: float, interrupt_fd: int | None = None) -> bool:
        """Wait up to ``timeout`` seconds for both; True once both have exited and been reaped (see PyspyRun.wait).
        Each is reaped as soon as it exits, whichever first, so that its end time is its own. Until the window's
        half that times it has begun to sample, it looks every SAMPLING_START_POLL_S for that moment."""
        deadline = time.monotonic() + timeout
        timing = self.active if self.active is not None else self.every
        while True:
            running = [run for run in self.runs if run.running]
            if not running:
                return True
            fds = [run._pidfd for run in running if run._pidfd is not None]
            if len(fds) < len(running):  # no pidfd (kernels before 5.3): one after the other
                return all(run.wait(max(0.0, deadline - time.monotonic()), interrupt_fd) for run in running)
            remaining = deadline - time.monotonic()
            looking = timing.running and not timing.sampling_read
            if looking:
                timing.note_sampling_start()
                looking = not timing.sampling_read
            ready, _, _ = select.select([*fds, *([interrupt_fd] if interrupt_fd is not None else [])], [], [],
                                        max(min(remaining, SAMPLING_START_POLL_S) if looking else remaining, 0.0))
            for run in running:
                if run._pidfd in ready:
                    run._reap(block=True)
            if (interrupt_fd is not None and interrupt_fd in ready) or (not ready and remaining <= 0):
                return not any(run.running for run in self.runs)

    def signal(self, sig: int) -> None:
        for run in self.runs:
            run.signal(sig)

    def kill_and_reap(self) -> None:
        for run in self.runs:
            run.kill_and_reap()


class PyspyChildren:
    """The py-spy children of one sampler: the one place they start, and what they cost in CPU all together.

    Shares the sampler's lock (given), so that no child starts once the sampler is closed: ``spawn`` and
    ``finish`` take it; ``close``, ``of_targets_other_than`` and ``running`` are called with it held.
    """

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._running: set[PyspyRun] = set()
        self._finished_cpu_seconds = 0.0
        self.closed = False

    def spawn(self, target_pid: int, argv: list[str], stdout_path: str, stderr_path: str | None) -> PyspyRun | str:
        """Start a child, or return why it could not start."""
        with self._lock:
            if self.closed:
                return "sampler closed"
            try:
                child = PyspyRun(target_pid, argv, stdout_path, stderr_path)
            except OSError as exc:
                return f"could not start py-spy at {argv[0]}: {exc}"
            self._running.add(child)
        return child

    def spawn_pair(self, target_pid: int, every: tuple[list[str], str], active: tuple[list[str], str]
                   ) -> RecordPair | str:
        """Start a record window's two children (each an argv and the file its stdout and stderr go to), or
        return why the first, ``every``, could not start; the second failing to start is the pair's
        ``active_error``."""
        first = self.spawn(target_pid, every[0], every[1], None)
        if isinstance(first, str):
            return first
        second = self.spawn(target_pid, active[0], active[1], None)
        if isinstance(second, str):
            return RecordPair(first, None, second)
        return RecordPair(first, second)

    def finish(self, child: PyspyRun | RecordPair) -> None:
        """A child (or both of a pair) has ended and been reaped: its CPU time joins the finished ones'."""
        runs = child.runs if isinstance(child, RecordPair) else (child,)
        with self._lock:
            for run in runs:
                self._running.discard(run)
                self._finished_cpu_seconds += run.cpu_seconds

    def cpu_seconds(self) -> float:
        """CPU seconds used by the children so far, finished and running."""
        with self._lock:
            running = list(self._running)
            finished = self._finished_cpu_seconds
        return finished + sum(child.live_cpu_seconds() for child in running)

    def running(self) -> list[PyspyRun]:
        """Under the lock: the children not yet finished."""
        return list(self._running)

    def of_targets_other_than(self, pids: Collection[int]) -> list[PyspyRun]:
        """Under the lock: the running children whose target is not among ``pids``."""
        return [child for child in self._running if child.target_pid not in pids]

    def close(self) -> list[PyspyRun]:
        """Under the lock: start no child from now on; the children still running."""
        self.closed = True
        return list(self._running)


# --- the command line of each kind of run -----------------------------------------------------------


def record_argv(pyspy_path: str | None, pid: int, window_s: float, out_path: str, rate_hz: float, *,
                native: bool, nonblocking: bool, idle: bool = True) -> list[str]:
    """A record window's half: raw stacks of every thread for ``window_s`` seconds, idle ones included (``idle``)
    or only those py-spy found active (see RecordPair)."""
    argv = [pyspy_path or "py-spy", "record", "--pid", str(pid), "--rate", f"{rate_hz:g}",
            *(["--idle"] if idle else []), "--threads", "--full-filenames", "--format", "raw",
            "--duration", str(max(1, round(window_s))), "-o", out_path]
    if native:
        argv.append("--native")
    elif nonblocking:
        argv.append("--nonblocking")
    return argv


def dump_argv(pyspy_path: str | None, pid: int, *, native: bool, nonblocking: bool) -> list[str]:
    """A dump: each thread's stack now, with py-spy's active and GIL flags, as JSON."""
    argv = [pyspy_path or "py-spy", "dump", "--pid", str(pid), "--json"]
    if nonblocking or native:  # a dump is never native, so it need not block
        argv.append("--nonblocking")
    return argv


def gil_argv(pyspy_path: str | None, pid: int, seconds: int, rate_hz: int, out_path: str) -> list[str]:
    """A GIL window: at each look, the stack of the thread that holds the GIL."""
    # Always nonblocking: a look reads one thread, and pausing the process for it would cost the job more
    # than the look. Never native: the holder's Python frames are what names it.
    return [pyspy_path or "py-spy", "record", "--pid", str(pid), "--rate", str(rate_hz), "--gil",
            "--threads", "--full-filenames", "--format", "raw", "--nonblocking",
            "--duration", str(seconds), "-o", out_path]


def backoff(failures: int) -> float:
    """How long to wait before running py-spy again after ``failures`` failures in a row."""
    return min(MAX_BACKOFF_S, 2.0 ** (failures - 1))


def read_output(path: str) -> str:
    """A py-spy output or log file; empty when it was never written."""
    return read_text(path) or ""


def remove_output(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass



# --- a profile for the user to keep: `gputop --flamegraph FILE` ----------------------------------------------

PROFILE_FORMATS = {".svg": "flamegraph", ".json": "speedscope"}  # by the file's suffix, as py-spy writes them
PROFILE_RATE_HZ = 20  # a flame graph wants more samples than a verdict; nonblocking, so the target runs on


class ProfileRecording:
    """One ``py-spy record`` over a target and its children, writing the user's flame graph (SVG) or speedscope
    file while gputop samples as usual. It runs beside the sampler rather than from its windows because py-spy
    draws only what it sampled itself (its raw windows cannot be fed back to it), and drawing is py-spy's job.

    ``finish`` stops it (SIGINT: py-spy writes its file and exits) and returns None, or one line saying why there
    is no file. The file is made 0600 before py-spy writes into it: it holds stacks and file paths.
    """

    def __init__(self, pid: int, out_path: str, *, rate_hz: float = PROFILE_RATE_HZ, native: bool = False,
                 pyspy_path: str | None = None) -> None:
        self.out_path = out_path
        self.format = PROFILE_FORMATS.get(Path(out_path).suffix.lower(), "flamegraph")
        self.problem: str | None = None
        self._proc: subprocess.Popen | None = None
        self._pid = pid
        path = pyspy_path or find_pyspy()
        if path is None:
            self.problem = f"no flame graph: py-spy not found; {install_hint()}"
            return
        os.close(os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        os.chmod(out_path, 0o600)  # an existing file keeps its mode through O_CREAT
        argv = [path, "record", "--pid", str(pid), "--subprocesses", "--threads", "--rate", f"{rate_hz:g}",
                "--format", self.format, "--output", out_path]
        if not native:
            argv.append("--nonblocking")  # as the sampler: never pause a GPU job for a picture
        else:
            argv.append("--native")
        self._log = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                      start_new_session=True)

    def finish(self, timeout_s: float = 30.0) -> str | None:
        """Stop recording and let py-spy write the file; None when it is written, else why not (one line)."""
        if self._proc is None:
            return self.problem
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
        try:
            self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._log.seek(0)
        output = self._log.read().decode(errors="replace")
        self._log.close()
        self._proc = None
        if os.path.getsize(self.out_path) > 0:
            return None
        _, reason = explain_failure(self._pid, output)
        self.problem = f"no flame graph written to {self.out_path}: {reason}"
        return self.problem
