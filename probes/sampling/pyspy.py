"""The stack sampler: the only module that runs the py-spy binary.

It owns the py-spy children (starting, reaping, retrying, their CPU cost) and the idle marking of their
samples. Reading py-spy's output is probes/sampling/pyspy_output.py; the rates, window lengths and dump cadence
each process gets are decided by its probes/sampling_policy.SamplingPolicy, which this module only obeys; who of
a many-process tree samples at all (alike DataLoader workers in turns, agreeing ranks about two at a time) by one
probes/tree_sampling.TreeSamplingPolicy over the tree, which each record window and dump waits for.

For each process of the target's tree, :class:`StackSampler` keeps two kinds of py-spy child running:

* a rolling ``py-spy record --format raw`` window. Measured here (py-spy 0.4.3, Python 3.11, a busy
  main thread plus 100 idle threads): a sample costs ~0.012 core-seconds (it grows with threads x
  rate) and each record start ~0.02-0.07, while one ``py-spy dump`` costs ~0.035 core-seconds, so a
  dump per sample would cost about three times as much and spawn a process per sample. ``record``
  writes its file only when it ends, so windows are short at first (1 s, so the first hot frames
  arrive fast) and then double up to 5 s to amortise the start (the policy's choice). Counts arrive in lumps, one per
  finished window. py-spy spaces samples randomly (exponential gaps), so a window's wall time varies.
* a ``py-spy dump --json`` every ``dump_every_s`` (the first at once). Raw output carries no idle flag;
  the dump gives each thread's current stack with py-spy's ``active`` and ``owns_gil`` flags. These
  are the reading's ``threads``, and they tell which of the windows' samples were idle. One dump per
  5 s costs a 25th of a dump per sample at 5 Hz.

* a ``py-spy record --gil`` window (who holds the GIL at each look), only while a thread other than the main
  one was seen working in the latest dump: a one-thread process cannot contend for its GIL, so most
  processes (DataLoader workers, a plain training loop) never get one. With ``--gil`` py-spy reads one
  thread per look (the holder) and skips the /proc scan of every thread's state, so a look is cheaper than
  a full sample; a look at which nobody holds the GIL records nothing, and ``--duration D --rate R`` takes
  exactly D x R looks of which the last is not written (py-spy 0.4 stops before recording it), so the
  window's looks are D x R - 1. Measured on tests/targets/gil_threads.py (a torch loop beside a pure-Python
  thread): 100 looks at 20 Hz cost 0.01 core-seconds against 0.04 for the full record of the same window.

py-spy runs ``--nonblocking`` by default: its blocking mode pauses the target on every sample and can
slow a torch process with many threads 5-15x (py-spy issue 872). ``--native`` cannot be combined
with ``--nonblocking``, so native sampling is blocking (dumps stay nonblocking: they are never native).
The default rate, 5 Hz, was measured with this sampler (records, dumps and starts together) on the
100-idle-thread target: 0.047 core at 2 Hz, 0.076 at 5 Hz, 0.146 at 10 Hz; with one thread, 0.009
core at 5 Hz.

A wake (the cheap per-tick signals moved, see probes/sampling/sampling_policy.py) ends the running record windows
with SIGINT, on which py-spy 0.4 writes what it sampled so far ("Stopped sampling because Control-C pressed");
SIGTERM or SIGKILL would lose it. Once two windows since the last wake are in, a process's dumps come every
second or two and double as stack checks: when three in a row catch the main thread in a function its recent
windows never saw it in (the policy's ``stack_check``), that process alone is woken the same way, for changes
of phase that only the stacks show. Each dump's CPU time (wait4) sets how often: all checks together stay
within probes/sampling_policy.stack_check_budget_cores (0.02 core for one process, towards 0.01 for a node's).

Children are started with ``posix_spawn`` and reaped with ``wait4`` so that their CPU time is known
(:meth:`StackSampler.sampler_cpu_seconds`). A py-spy that fails is retried with exponential backoff
(capped at 30 s); one killed by someone else (the OOM killer, a stray ``kill``) is restarted the same way
and each restart is reported with its count; a process that exits is reported once and left alone. Every
child ends by itself within a window even if gputop is killed, and :meth:`StackSampler.close` kills them
at once.
"""

from __future__ import annotations

import dataclasses
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
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from probes.frame import GilSamples, SampledWindow, StackCount, StackFrame, StacksReading, ThreadStack
from probes.sampling.pyspy_output import (
    KNOWN_WAITS,
    dominant_position,
    is_worker_stack,
    main_thread_position,
    main_thread_positions,
    other_thread_working,
    parse_dump,
    parse_raw,
    samples_in,
)
from probes.sampling.sampling_policy import (
    DEFAULT_DUMP_EVERY_S,
    DEFAULT_RATE_HZ,
    FIRST_WINDOW_S,
    MAX_WINDOW_S,
    STACK_CHECK_EVERY_S,
    PhaseChangeDetector,
    PhaseSignals,
    SamplingPolicy,
    WindowPlan,
    stack_check_interval_s,
)
from probes.sampling.stacks import frame_matches, merge_counts
from probes.sampling.tree_sampling import TreeSamplingPolicy
from probes.sensors.textfiles import read_text

MAX_BACKOFF_S = 30.0
DUMP_TIMEOUT_S = 15.0
PTRACE_SCOPE_PATH = "/proc/sys/kernel/yama/ptrace_scope"
# After a wake, the phase mark waits for the windows it ended early at most this long (less than a tick, so the
# mark lands on the next tick and the first window of the new phase, a second long, is not held back). py-spy
# writes a window only at its next sample after SIGINT: at 1 Hz that can take seconds. A window that comes
# after its mark is dropped: its samples straddle the change and would hold the old verdict.
CUT_WINDOW_WAIT_S = 0.8
CUT_EXIT_WAIT_S = 10.0  # a window ended early that has not written its samples by then is killed

# A process counts as failing after this many "other" failures in a row: nonblocking reads of a
# running process occasionally fail once, which should not flip the whole reading to unavailable.
TRANSIENT_FAILURES_TOLERATED = 1
# GIL windows: the first is short so that a contended GIL is named soon after a helper thread starts working;
# later ones are longer because each py-spy start costs as much as tens of looks. Between windows, while no
# thread other than the main one works, the loop checks the latest dump this often.
GIL_FIRST_WINDOW_S = 5
GIL_WINDOW_S = 10
GIL_GATE_POLL_S = 1.0
# How many (thread, innermost frame) -> idle observations to remember for marking counts.
FRAME_ACTIVITY_MEMORY = 4096

_STATUS_STARTING = "starting"
_STATUS_OK = "ok"
_STATUS_FAILING = "failing"
_STATUS_EXITED = "exited"

_FAILURE_EXITED = "exited"
_FAILURE_PERMISSION = "permission"
_FAILURE_NOT_PYTHON = "not_python"
_FAILURE_OTHER = "other"

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


def _process_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def explain_failure(pid: int, output: str) -> tuple[str, str]:
    """(kind, reason a person can act on) for a py-spy run that failed on ``pid``."""
    if _process_gone(pid):
        return _FAILURE_EXITED, f"PID {pid} exited"
    lowered = output.lower()
    if "permission denied" in lowered or "operation not permitted" in lowered or "(os error 1)" in lowered:
        return _FAILURE_PERMISSION, permission_reason(pid)
    if "failed to find python version" in lowered or "failed to find a python interpreter" in lowered:
        return _FAILURE_NOT_PYTHON, f"PID {pid} is not a Python process (py-spy found no interpreter)"
    error_lines = [line.strip() for line in output.splitlines() if line.strip().startswith("Error:")]
    other_lines = [line.strip() for line in output.splitlines() if line.strip()]
    detail = (error_lines or other_lines or ["no output"])[-1]
    return _FAILURE_OTHER, f"py-spy failed on PID {pid}: {detail[:200]}"


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
        return DumpCheck(ok=False, kind=_FAILURE_OTHER,
                         reason=f"py-spy dump of PID {pid} did not finish within {timeout_s:g} s")
    except OSError as exc:
        return DumpCheck(ok=False, kind=_FAILURE_OTHER, reason=f"py-spy could not be run: {exc.strerror or exc}")
    if result.returncode == 0:
        try:
            threads = parse_dump(result.stdout, pid)
        except Exception:  # an output this version cannot read is still a dump that worked
            threads = []
        return DumpCheck(ok=True, threads=len(threads))
    kind, reason = explain_failure(pid, result.stderr + "\n" + result.stdout)
    return DumpCheck(ok=False, kind=kind, reason=reason)


# --- one py-spy child ------------------------------------------------------------------------------


class _PyspyRun:
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
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        actions = [
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


# --- per-process sampling --------------------------------------------------------------------------


@dataclass
class _Window:
    pid: int
    counts: list[StackCount]
    samples: int
    wall_seconds: float
    epoch: int = 0  # the process's policy epoch when the window started
    started: float = 0.0  # time.time() when it started
    rate_hz: float | None = None  # the rate py-spy was asked for


@dataclass
class _ProcessState:
    status: str = _STATUS_STARTING
    reason: str | None = None
    failure_kind: str | None = None  # the _FAILURE_* of the failure that made it failing
    consecutive_other_failures: int = 0
    threads: tuple[ThreadStack, ...] = ()
    rate_hz: float | None = None
    is_worker: bool = False
    behind_reported: bool = False
    restarts: int = 0  # py-spy children killed by someone else and started again
    gil: list[GilSamples] = field(default_factory=list)  # GIL windows finished since the last collect


@dataclass
class _ProcessSampler:
    """The two loops (record windows, dumps) for one process."""

    pid: int
    policy: SamplingPolicy  # rates, window lengths, dump cadence; read and changed under the sampler's lock
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    window_epoch: int | None = None  # the running record window's epoch; None between windows
    record_child: _PyspyRun | None = None  # the running record window's py-spy, to end it early
    # A wake writes a byte here so that the record loop stops waiting for the window it ended: py-spy only
    # notices SIGINT at its next sample (a second or two at 1 Hz), and the next window should not wait for it.
    wake_pipe: tuple[int, int] = field(default_factory=lambda: os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC))
    # CPU seconds a dump of this process costs (smoothed): how often its stacks can be checked within budget.
    dump_cpu_s: float | None = None


class StackSampler:
    """Samples the stacks of a set of processes with py-spy on background threads; thread-safe.

    ``collect()`` drains what was gathered since the previous call. Counts arrive once per finished
    record window (1 s at first, then up to ``max_window_s``), so most ticks carry no counts: sum
    them over several frames. Each count's ``idle`` is judged from its innermost Python frame: a known
    blocking call (threading wait, selectors select, ...) is idle; elsewhere, the flag py-spy last
    gave the same thread at that frame and line in a dump, else any thread there, else busy.
    ``achieved_rate_hz`` is samples per second of wall time over the latest windows, gaps included.

    ``observe()`` takes each tick's cheap signals (before ``collect()``); when the policy's detector says
    they moved, ``wake()`` ends the running windows with SIGINT so their samples come now, and the reading
    that carries them says so in ``phase_change``.
    """

    def __init__(
        self,
        rate_hz: float = DEFAULT_RATE_HZ,
        native: bool = False,
        nonblocking: bool = True,
        dump_every_s: float = DEFAULT_DUMP_EVERY_S,
        pyspy_path: str | None = None,
        *,
        first_window_s: float = FIRST_WINDOW_S,
        max_window_s: float = MAX_WINDOW_S,
        settled_rate_hz: float | None = None,
        stack_check_every_s: float | None = STACK_CHECK_EVERY_S,
    ) -> None:
        """settled_rate_hz: sample at this rate while the picture holds still (None: always rate_hz).
        stack_check_every_s: dump at most this often to check the main thread's stack (None: never)."""
        self.rate_hz = float(rate_hz)
        self.settled_rate_hz = float(settled_rate_hz) if settled_rate_hz is not None else None
        self.native = native
        self.nonblocking = nonblocking and not native  # py-spy cannot combine them
        self.dump_every_s = dump_every_s
        self.first_window_s = first_window_s
        self.max_window_s = max(max_window_s, first_window_s)
        self.stack_check_every_s = stack_check_every_s
        self.pyspy_path = pyspy_path or find_pyspy()
        self.version: str | None = None
        self._unavailable_reason: str | None = None
        if self.pyspy_path is None:
            self._unavailable_reason = f"py-spy not found beside {sys.executable} or on PATH; {install_hint()}"
        else:
            self.version = pyspy_version(self.pyspy_path)
            if self.version is None:
                self._unavailable_reason = f"py-spy at {self.pyspy_path} does not run; {install_hint()}"

        self._lock = threading.Lock()
        self._closed = False
        self._workdir = tempfile.mkdtemp(prefix="gputop-pyspy-")
        self._samplers: dict[int, _ProcessSampler] = {}
        self._retired: list[_ProcessSampler] = []
        self._states: dict[int, _ProcessState] = {}
        self._windows: list[_Window] = []
        self._events: list[str] = []  # one-off errors since the last collect
        self._children: set[_PyspyRun] = set()
        self._finished_cpu_seconds = 0.0
        # Idle flags the dumps gave to innermost Python frames: per thread, and for any thread.
        self._thread_position_idle: OrderedDict[tuple[int, int, str, str, int], bool] = OrderedDict()
        self._position_idle: OrderedDict[tuple[str, str, int], bool] = OrderedDict()
        # Waking on a change of phase (see probes/sampling/sampling_policy.py): the detector, and the mark the next
        # reading carries once the windows that were ended early are in.
        self._detector = PhaseChangeDetector()
        self._mark: str | None = None
        self._mark_since = 0.0
        self._mark_epochs: dict[int, int] = {}  # per pid, the first epoch after the wake
        self._awaiting_cut: set[int] = set()  # pids whose ended-early window has not been delivered yet
        self._marked_epochs: dict[int, int] = {}  # per pid, the epoch the latest mark put on a reading began
        # Over the whole tree: who may sample now (probes/sampling/tree_sampling.py); everyone, until set_roles says
        # more.
        self._tree = TreeSamplingPolicy()

    def _new_policy(self) -> SamplingPolicy:
        return SamplingPolicy(self.rate_hz, self.settled_rate_hz, first_window_s=self.first_window_s,
                              max_window_s=self.max_window_s, dump_every_s=self.dump_every_s,
                              stack_check_every_s=self.stack_check_every_s)

    # --- public API ---------------------------------------------------------------------------

    @property
    def description(self) -> str:
        mode = "native, blocking" if self.native else ("nonblocking" if self.nonblocking else "blocking")
        return f"py-spy {self.version or '?'} ({mode})"

    def set_targets(self, pids: Sequence[int]) -> None:
        """Sample exactly these processes: start samplers for new pids, stop those for dropped ones."""
        wanted = list(dict.fromkeys(int(p) for p in pids))
        with self._lock:
            if self._closed:
                return
            for pid in [p for p in self._states if p not in wanted]:
                self._states.pop(pid)
                self._mark_epochs.pop(pid, None)
                self._marked_epochs.pop(pid, None)
                self._awaiting_cut.discard(pid)
                sampler = self._samplers.pop(pid, None)
                if sampler is not None:
                    sampler.stop.set()
                    self._retired.append(sampler)
            self._retired = [s for s in self._retired if any(t.is_alive() for t in s.threads)]
            if self._unavailable_reason is not None:
                for pid in wanted:
                    self._states.setdefault(pid, _ProcessState())
                return
            for pid in wanted:
                if pid in self._samplers:
                    continue
                self._states[pid] = _ProcessState()
                sampler = _ProcessSampler(pid, self._new_policy())
                sampler.threads = [
                    threading.Thread(target=self._record_loop, args=(sampler,),
                                     name=f"gputop-pyspy-record-{pid}", daemon=True),
                    threading.Thread(target=self._dump_loop, args=(sampler,),
                                     name=f"gputop-pyspy-dump-{pid}", daemon=True),
                    threading.Thread(target=self._gil_loop, args=(sampler,),
                                     name=f"gputop-pyspy-gil-{pid}", daemon=True),
                ]
                self._samplers[pid] = sampler
                for thread in sampler.threads:
                    thread.start()
            retired_children = [c for c in self._children if c.target_pid not in wanted]
        for child in retired_children:
            child.signal(signal.SIGKILL)

    def restart(self, pids: Sequence[int], reason: str) -> None:
        """Sample these processes afresh, as if new: their py-spy children are killed, what their samplers
        learnt is dropped (a window still running holds the old program's stacks), and new ones start
        with short windows. For a process that ran a new program (exec keeps the PID). ``reason`` goes
        into the next reading's errors."""
        with self._lock:
            if self._closed:
                return
            current = list(self._states)
            restarted = [pid for pid in dict.fromkeys(pids) if pid in self._states]
            if not restarted:
                return
            self._events.append(reason)
        self.set_targets([pid for pid in current if pid not in restarted])
        self.set_targets(current)

    def set_roles(self, roles: dict[int, tuple[str, int | None] | None]) -> None:
        """Each sampled process's part in the tree, for the tree's policy: ("worker", its training process),
        ("rank", None), or None (samples on its own). See probes/sampling/tree_sampling.py."""
        with self._lock:
            self._tree.set_roles(roles)

    def observe(self, now: float, signals: dict[int, PhaseSignals]) -> str | None:
        """This tick's cheap signals per process (``now``: time.monotonic()); when they say the picture may have
        moved, wake() and return why. The processes that moved are called up at once (the tree's policy); the
        wake spares what the tree's policy says did not move (workers that did not, and everyone else when only
        workers did): on a node's 73 processes a wake of all of them every few seconds cost more than the rest."""
        with self._lock:
            reason = self._detector.observe(now, signals, steady=self._tree.steady_pids())
            moved = self._detector.moved_pids
            self._tree.called_up(moved, time.monotonic())
            spared = self._tree.spared_by_wake(moved)
        if reason is not None:
            self.wake(reason, spared=spared)
        return reason

    def wake(self, reason: str, pids: Sequence[int] | None = None, wait_for_cut: bool = True,
             spared: set[int] | frozenset[int] = frozenset()) -> None:
        """Look closely again at once: every process (or those of ``pids``, less those ``spared``) goes back to
        the fast rate, and its running record window is ended with SIGINT, on which py-spy writes the samples
        it has, so they arrive now rather than at the window's end. The reading that carries them is marked
        with ``reason`` (phase_change): stack counts up to it describe the phase before. ``wait_for_cut``
        False: the mark does not wait for those samples (the next reading carries it; they come late and are
        dropped). ``spared``: what the tree's policy says did not move (probes/sampling/tree_sampling.py)."""
        to_cut = []
        with self._lock:
            if self._closed:
                return
            if pids is not None:  # a stack check saw these move: the tree's policy calls them up, as observe() does
                self._tree.called_up(pids, time.monotonic())
            for pid, sampler in self._samplers.items():
                if (pids is not None and pid not in pids) or pid in spared:
                    continue
                sampler.policy.wake()
                self._mark_epochs[pid] = sampler.policy.epoch
                if sampler.window_epoch is None:
                    continue
                if wait_for_cut:
                    self._awaiting_cut.add(pid)
                if sampler.record_child is not None:
                    sampler.record_child.cut = True
                    to_cut.append(sampler.record_child)
                    try:
                        os.write(sampler.wake_pipe[1], b"w")  # the loop stops waiting for this window
                    except OSError:  # full: a wake is already waiting to be read
                        pass
                # else its py-spy is starting: _run ends it as soon as it runs
            self._mark, self._mark_since = reason, time.monotonic()
        for child in to_cut:
            child.signal(signal.SIGINT)

    def collect(self) -> StacksReading:
        """Everything gathered since the previous collect()."""
        with self._lock:
            windows, self._windows = self._windows, []
            phase_change = None
            late = [w for w in windows if w.epoch < self._marked_epochs.get(w.pid, 0)]
            if late:
                late_ids = {id(w) for w in late}
                windows = [w for w in windows if id(w) not in late_ids]
            if self._mark is not None:
                # Windows started after the wake belong after the mark: they wait for the reading after it.
                later = [w for w in windows if w.epoch >= self._mark_epochs.get(w.pid, 0) > 0]
                later_ids = {id(w) for w in later}
                windows = [w for w in windows if id(w) not in later_ids]
                self._windows = later
                if not self._awaiting_cut or time.monotonic() - self._mark_since > CUT_WINDOW_WAIT_S:
                    phase_change, self._mark = self._mark, None
                    self._awaiting_cut.clear()
                    self._marked_epochs = dict(self._mark_epochs)
            events, self._events = self._events, []
            states = dict(self._states)
            counts = [self._mark_idle(c) for w in windows for c in w.counts]
            for window in windows:
                state = states.get(window.pid)
                if state is not None and window.wall_seconds > 0:
                    state.rate_hz = window.samples / window.wall_seconds
            failing = [s.reason for s in states.values() if s.status == _STATUS_FAILING and s.reason]
            threads = tuple(t for s in states.values() if s.status == _STATUS_OK for t in s.threads)
            rates = [s.rate_hz for s in states.values() if s.rate_hz is not None and s.status == _STATUS_OK]
            gil = []
            for state in states.values():
                gil.extend(state.gil)
                state.gil = []
        samples = sum(w.samples for w in windows)
        available, reason = self._availability(states)
        return StacksReading(
            available=available,
            reason=reason,
            blocked=None if available else self._blocked(states),
            sampler=self.description if self.pyspy_path else None,
            rate_hz=self.rate_hz,
            achieved_rate_hz=round(sum(rates) / len(rates), 2) if rates else None,
            samples=samples,
            native=self.native,
            threads=threads,
            counts=merge_counts(counts),
            errors=tuple(dict.fromkeys(events + failing)),
            phase_change=phase_change,
            gil=tuple(gil),
            windows=tuple(SampledWindow(pid=w.pid, started=round(w.started, 3), seconds=round(w.wall_seconds, 3),
                                        samples=w.samples, rate_hz=w.rate_hz) for w in windows),
        )

    def worker_pids(self) -> set[int]:
        """Pids whose stacks run torch's DataLoader ``_worker_loop`` (with fork it sits under the
        parent's copied frames, so it is looked for anywhere in the stack, not only at the root)."""
        with self._lock:
            return {pid for pid, state in self._states.items() if state.is_worker}

    def sampler_cpu_seconds(self) -> float:
        """CPU seconds used by this sampler's py-spy children so far, finished and running."""
        with self._lock:
            running = list(self._children)
            finished = self._finished_cpu_seconds
        return finished + sum(child.live_cpu_seconds() for child in running)

    def close(self) -> None:
        """Stop every sampler and kill every py-spy child; returns once they are reaped."""
        with self._lock:
            self._closed = True
            samplers = list(self._samplers.values()) + self._retired
            self._samplers.clear()
            self._retired = []
            for sampler in samplers:
                sampler.stop.set()
            children = list(self._children)
        for child in children:
            child.signal(signal.SIGKILL)
        for sampler in samplers:
            for thread in sampler.threads:
                thread.join(timeout=10)
        with self._lock:
            leftovers = list(self._children)
        for child in leftovers:  # only if a loop thread is stuck: never leave a child behind
            child.kill_and_reap()
        shutil.rmtree(self._workdir, ignore_errors=True)

    # --- availability and idle marking -------------------------------------------------------------

    def _availability(self, states: dict[int, _ProcessState]) -> tuple[bool, str | None]:
        if self._unavailable_reason is not None:
            return False, self._unavailable_reason
        if not states:
            return False, "no target process to sample"
        if any(s.status in (_STATUS_STARTING, _STATUS_OK) for s in states.values()):
            return True, None
        reasons = [s.reason for s in states.values() if s.reason]
        return False, "; ".join(dict.fromkeys(reasons)) or "no process could be sampled"

    def _blocked(self, states: dict[int, _ProcessState]) -> str | None:
        """A few words for why no process's stacks can be read at all, when that is the case: the verdict then
        says "cannot see" instead of guessing. None while a process is merely starting or has exited."""
        if self._unavailable_reason is not None:
            return "py-spy missing" if self.pyspy_path is None else "py-spy does not run"
        kinds = {s.failure_kind for s in states.values() if s.status == _STATUS_FAILING}
        for kind, words in ((_FAILURE_PERMISSION, "ptrace denied"), (_FAILURE_NOT_PYTHON, "not a Python process"),
                            (_FAILURE_OTHER, "py-spy fails")):
            if kind in kinds:
                return words
        return None

    @staticmethod
    def _innermost_python(frames: Sequence[StackFrame]) -> StackFrame | None:
        return next((f for f in frames if not f.native), None)

    def _mark_idle(self, count: StackCount) -> StackCount:
        idle = self._judge_idle(count.pid, count.tid, self._innermost_python(count.frames))
        return count if idle == count.idle else StackCount(
            pid=count.pid, tid=count.tid, thread_name=count.thread_name, idle=idle,
            frames=count.frames, count=count.count,
        )

    def _judge_idle(self, pid: int, tid: int, frame: StackFrame | None) -> bool:
        """Whether a sample at ``frame`` (innermost Python frame) was idle.

        A known blocking call is idle even when a dump caught the thread running there (waking
        up, say). Elsewhere the dumps decide: threads wait at a few recurring places that the dumps
        soon see, while busy code moves through many lines that a dump every few seconds rarely
        catches, so a place no dump has seen is taken as busy, and so is a place any dump saw running.
        """
        if frame is None:
            return False
        if any(frame_matches(frame, name, suffix) for name, suffix in KNOWN_WAITS):
            return True
        position = (frame.function, frame.file, frame.line)
        seen = self._thread_position_idle.get((pid, tid, *position))
        if seen is None:
            seen = self._position_idle.get(position, False)
        return seen

    def _remember_activity(self, threads: Sequence[ThreadStack]) -> None:
        for thread in threads:
            frame = self._innermost_python(thread.frames)
            if frame is None:
                continue
            position = (frame.function, frame.file, frame.line)
            for memory, key in ((self._thread_position_idle, (thread.pid, thread.tid, *position)),
                                (self._position_idle, position)):
                # Busy wins: a thread caught running at a place is busy there, even if a later dump
                # (under CPU contention, between time slices) calls it inactive at the same line.
                memory[key] = thread.idle and memory.get(key, True)
                memory.move_to_end(key)
                while len(memory) > FRAME_ACTIVITY_MEMORY:
                    memory.popitem(last=False)

    # --- children ---------------------------------------------------------------------------------

    def _spawn(self, target_pid: int, argv: list[str], stdout_path: str,
               stderr_path: str | None) -> _PyspyRun | str:
        """Start a child, or return why it could not start."""
        with self._lock:
            if self._closed:
                return "sampler closed"
            try:
                child = _PyspyRun(target_pid, argv, stdout_path, stderr_path)
            except OSError as exc:
                return f"could not start py-spy at {argv[0]}: {exc}"
            self._children.add(child)
        return child

    def _finish(self, child: _PyspyRun) -> None:
        with self._lock:
            self._children.discard(child)
            self._finished_cpu_seconds += child.cpu_seconds

    def _run(self, sampler: _ProcessSampler, argv: list[str], stdout_path: str, stderr_path: str | None,
             timeout: float, record: bool = False,
             dump: bool = False) -> tuple[int | None, str | None, str | None, _PyspyRun | None]:
        """Run one child to its end (or kill it after ``timeout``); (returncode, spawn error, the signal
        that killed it when that was not gputop's doing, the child when a wake ended it early and it is still
        finishing). ``record``: the process's record window, which a wake may end early; such a child is
        returned running, for _finish_cut to wait for, so that the next window need not. ``dump``: a dump, whose
        CPU time is remembered (how often the stacks can be checked)."""
        child = self._spawn(sampler.pid, argv, stdout_path, stderr_path)
        if isinstance(child, str):
            return None, child, None, None
        cut_now = False
        if record:
            _drain(sampler.wake_pipe[0])  # wakes between windows concern no running child
            with self._lock:
                sampler.record_child = child
                # A wake came between planning this window and starting it: it would straddle the change.
                cut_now = sampler.window_epoch is not None and sampler.window_epoch != sampler.policy.epoch
                child.cut = cut_now
        if cut_now:
            child.signal(signal.SIGINT)
        handed_off = False
        try:
            deadline = time.monotonic() + timeout
            while not child.wait(max(0.0, deadline - time.monotonic()),
                                 sampler.wake_pipe[0] if record else None):
                if child.cut:
                    handed_off = True
                    return None, None, None, child
                if time.monotonic() >= deadline:
                    child.signal(signal.SIGINT)  # record writes what it has on SIGINT
                    if not child.wait(2.0):
                        child.kill_and_reap()
                    break
                _drain(sampler.wake_pipe[0])  # a wake for a window that has since ended
        finally:
            if record:
                with self._lock:
                    sampler.record_child = None
            if not handed_off:
                if child.running:
                    child.kill_and_reap()
                self._finish(child)
                if dump and child.cpu_seconds > 0:  # what a stack check costs (stack_check_interval_s)
                    before = sampler.dump_cpu_s
                    sampler.dump_cpu_s = child.cpu_seconds if before is None else 0.7 * before + 0.3 * child.cpu_seconds
        return child.returncode, None, child.killed_by, (child if child.cut else None)

    # --- the two loops ----------------------------------------------------------------------------

    def _record_argv(self, pid: int, window_s: float, out_path: str, rate_hz: float) -> list[str]:
        argv = [self.pyspy_path or "py-spy", "record", "--pid", str(pid), "--rate", f"{rate_hz:g}",
                "--idle", "--threads", "--full-filenames", "--format", "raw",
                "--duration", str(max(1, round(window_s))), "-o", out_path]
        if self.native:
            argv.append("--native")
        elif self.nonblocking:
            argv.append("--nonblocking")
        return argv

    def _dump_argv(self, pid: int) -> list[str]:
        argv = [self.pyspy_path or "py-spy", "dump", "--pid", str(pid), "--json"]
        if self.nonblocking or self.native:  # a dump is never native, so it need not block
            argv.append("--nonblocking")
        return argv

    def _wait_turn(self, sampler: _ProcessSampler, dump: bool = False) -> bool:
        """Wait until the tree's policy lets this process start a record window (or, ``dump``, a dump); False
        when its sampler was stopped meanwhile."""
        while not sampler.stop.is_set():
            with self._lock:
                wait_s = self._tree.wait_s(sampler.pid, time.monotonic(), dump=dump)
            if wait_s <= 0:
                return True
            sampler.stop.wait(wait_s)
        return False

    def _record_loop(self, sampler: _ProcessSampler) -> None:
        try:
            self._record_windows(sampler)
        finally:
            with self._lock:  # under the lock: wake() writes to the pipe only while it is open
                read_fd, write_fd = sampler.wake_pipe
                sampler.wake_pipe = (-1, -1)
            os.close(read_fd)
            os.close(write_fd)

    def _finish_cut(self, sampler: _ProcessSampler, child: _PyspyRun, out_path: str, log_path: str,
                    plan: WindowPlan, started: float) -> None:
        """Wait for a window a wake ended (py-spy writes at its next sample) and deliver what it took."""
        try:
            if not child.wait(CUT_EXIT_WAIT_S):
                child.kill_and_reap()
        finally:
            if child.running:
                child.kill_and_reap()
            self._finish(child)
        raw = _read(out_path) if child.returncode == 0 else ""
        _remove(out_path)
        _remove(log_path)
        if raw and not sampler.stop.is_set():
            counts = parse_raw(raw, sampler.pid, native=self.native)
            wall_seconds = time.monotonic() - started
            self._deliver_window(sampler, _Window(sampler.pid, counts, samples_in(counts), wall_seconds, plan.epoch,
                                                  time.time() - wall_seconds, plan.rate_hz))
        else:
            self._window_gone(sampler, plan.epoch)

    def _record_windows(self, sampler: _ProcessSampler) -> None:
        pid = sampler.pid
        failures = 0
        window_number = 0
        while not sampler.stop.is_set():
            # Each window its own files: one a wake ended may still be writing while the next one runs.
            window_number += 1
            out_path = os.path.join(self._workdir, f"record-{pid}-{window_number}.txt")
            log_path = os.path.join(self._workdir, f"record-{pid}-{window_number}.log")
            if not self._wait_turn(sampler):
                return
            with self._lock:
                plan = sampler.policy.next_window()
                turn_s = self._tree.turn_length_s(pid)
                if turn_s is not None:  # a worker's turn: its siblings showed what it runs, so no close look
                    plan = dataclasses.replace(plan, seconds=turn_s,
                                               rate_hz=min(plan.rate_hz, self.settled_rate_hz or plan.rate_hz))
                sampler.window_epoch = plan.epoch
                self._tree.window_started(pid, time.monotonic())
            started = time.monotonic()
            returncode, spawn_error, killed_by, cut_child = self._run(
                sampler, self._record_argv(pid, plan.seconds, out_path, plan.rate_hz), log_path, None,
                timeout=3 * plan.seconds + 10, record=True,
            )
            wall_seconds = time.monotonic() - started
            with self._lock:
                sampler.window_epoch = None
                self._tree.window_dropped(pid)  # a window with samples says what it showed below
            if cut_child is not None and returncode is None:  # handed off, maybe still running
                if sampler.stop.is_set():
                    cut_child.kill_and_reap()
                    self._finish(cut_child)
                    return
                finisher = threading.Thread(target=self._finish_cut, name=f"gputop-pyspy-cut-{pid}", daemon=True,
                                            args=(sampler, cut_child, out_path, log_path, plan, started))
                with self._lock:
                    # Finished finishers go: a process woken often would otherwise keep one Thread per wake
                    # for the whole run (an hour's tracemalloc soak found them among what grew).
                    sampler.threads = [t for t in sampler.threads if t.is_alive() or t.ident is None]
                    sampler.threads.append(finisher)
                finisher.start()
                continue
            cut = cut_child is not None
            if sampler.stop.is_set():
                return
            if killed_by is not None:  # its window is lost (record writes only at its end): start again
                failures += 1
                self._note_killed(sampler, "record", killed_by, _backoff(failures))
                sampler.stop.wait(_backoff(failures))
                continue
            log = _read(log_path)
            raw = _read(out_path) if returncode == 0 or cut else ""
            _remove(out_path)
            _remove(log_path)
            if raw:
                counts = parse_raw(raw, pid, native=self.native)
                self._deliver_window(sampler, _Window(pid, counts, samples_in(counts), wall_seconds, plan.epoch,
                                                      time.time() - wall_seconds, plan.rate_hz))
            else:
                self._window_gone(sampler, plan.epoch)
            if returncode == 0 and "process exited" in log:
                if _process_gone(pid):
                    self._note_failure(sampler, _FAILURE_EXITED, f"PID {pid} exited")
                    return
                # py-spy says "exited" also when a live process turned unreadable (non-dumpable) or ran a
                # new program mid-window: the next window says why, after a pause in case it repeats.
                failures += 1
                sampler.stop.wait(_backoff(failures))
                continue
            if (returncode == 0 or cut) and raw:
                failures = 0
                self._note_success(sampler, behind="behind in sampling" in log)
                picture = dominant_position(counts)
                with self._lock:
                    # A rank whose picture moved to one another rank shows: the job's step caught at another
                    # moment, not a change of its own (on a node's job, a quarter of the ranks' windows were
                    # such close looks, 1 to 5 s at 5 Hz).
                    sampler.policy.window_finished(picture, samples_in(counts), plan.epoch,
                                                   main_thread_positions(counts, pid),
                                                   moved_with_peers=self._tree.another_rank_shows(pid, picture))
                    self._tree.window_finished(pid, picture, sampler.policy.settled, time.monotonic())
                continue
            if cut:  # ended before its first sample: nothing failed, start the next window
                continue
            kind, reason = (_FAILURE_OTHER, spawn_error) if spawn_error else explain_failure(pid, log)
            if returncode == 0 and kind == _FAILURE_OTHER:
                reason = f"py-spy recorded no samples of PID {pid}"
            self._note_failure(sampler, kind, reason)
            if kind == _FAILURE_EXITED:
                return
            failures += 1
            sampler.stop.wait(_backoff(failures))

    def _gil_argv(self, pid: int, seconds: int, rate_hz: int, out_path: str) -> list[str]:
        # Always nonblocking: a look reads one thread, and pausing the process for it would cost the job more
        # than the look. Never native: the holder's Python frames are what names it.
        return [self.pyspy_path or "py-spy", "record", "--pid", str(pid), "--rate", str(rate_hz), "--gil",
                "--threads", "--full-filenames", "--format", "raw", "--nonblocking",
                "--duration", str(seconds), "-o", out_path]

    def _gil_loop(self, sampler: _ProcessSampler) -> None:
        """GIL windows back to back while another thread than the main one works (see the module docstring).

        Failures are not reported here: the record and dump loops of the same process say why py-spy
        cannot read it; a GIL window that did not run to its end is dropped (its looks are unknown)."""
        pid = sampler.pid
        out_path = os.path.join(self._workdir, f"gil-{pid}.txt")
        log_path = os.path.join(self._workdir, f"gil-{pid}.log")
        windows = failures = 0
        while not sampler.stop.is_set():
            with self._lock:
                state = self._current_state(sampler)
                wanted = state is not None and state.status == _STATUS_OK and other_thread_working(pid, state.threads)
            if not wanted:
                sampler.stop.wait(GIL_GATE_POLL_S)
                continue
            seconds = GIL_FIRST_WINDOW_S if windows == 0 else GIL_WINDOW_S
            rate_hz = max(1, round(self.rate_hz))  # py-spy takes whole looks per second
            windows += 1
            returncode, _, _, _ = self._run(sampler, self._gil_argv(pid, seconds, rate_hz, out_path), log_path,
                                            None, timeout=3 * seconds + 10)
            if sampler.stop.is_set():
                return
            log = _read(log_path)
            raw = _read(out_path)
            _remove(out_path)
            _remove(log_path)
            if returncode != 0 or "Stopped sampling" in log:
                failures += 1
                sampler.stop.wait(_backoff(failures))
                continue
            failures = 0
            looks = seconds * rate_hz - 1
            holders = tuple(merge_counts(parse_raw(raw, pid)))
            with self._lock:
                state = self._current_state(sampler)
                if state is not None:
                    state.gil.append(GilSamples(pid=pid, samples=looks, holders=holders))

    def _dump_loop(self, sampler: _ProcessSampler) -> None:
        pid = sampler.pid
        out_path = os.path.join(self._workdir, f"dump-{pid}.json")
        err_path = os.path.join(self._workdir, f"dump-{pid}.err")
        failures = 0
        while not sampler.stop.is_set():
            if not self._wait_turn(sampler, dump=True):
                return
            started = time.monotonic()
            returncode, spawn_error, killed_by, _ = self._run(sampler, self._dump_argv(pid), out_path, err_path,
                                                              timeout=DUMP_TIMEOUT_S, dump=True)
            if sampler.stop.is_set():
                return
            if killed_by is not None:
                failures += 1
                self._note_killed(sampler, "dump", killed_by, _backoff(failures))
                sampler.stop.wait(_backoff(failures))
                continue
            threads = None
            if returncode == 0:
                try:
                    threads = parse_dump(_read(out_path), pid)
                except (ValueError, TypeError, AttributeError):
                    threads = None
            if threads is not None:
                failures = 0
                self._deliver_dump(sampler, threads)
                with self._lock:
                    state = self._current_state(sampler)
                    if state is not None and state.is_worker:  # its parent's main thread shows its changes
                        sampler.policy.check_stacks = False
                    moved = sampler.policy.stack_check(main_thread_position(threads, pid))
                    if self.stack_check_every_s is not None:  # within the checks' CPU budget, shared by all
                        checked = sum(1 for s in self._samplers.values() if s.policy.checking_stacks)
                        sampler.policy.stack_check_every_s = stack_check_interval_s(
                            sampler.dump_cpu_s, checked, self.stack_check_every_s)
                    wait_s = self._tree.dump_wait_s(pid, sampler.policy.dump_wait_s())
                if moved is not None and not sampler.stop.is_set():
                    # The dumps saw the new phase: the ended window's samples (a second or more of the old
                    # phase, and py-spy at 1 Hz may take that long to write them) would only delay the mark.
                    self.wake(f"PID {pid}: {moved}", pids=[pid], wait_for_cut=False)
                # From this dump's start: on a crowded machine a dump can take a good part of a second.
                sampler.stop.wait(max(0.0, wait_s - (time.monotonic() - started)))
                continue
            if spawn_error:
                kind, reason = _FAILURE_OTHER, spawn_error
            elif returncode == 0:
                kind, reason = _FAILURE_OTHER, f"py-spy dump of PID {pid} printed no readable JSON"
            else:
                kind, reason = explain_failure(pid, _read(err_path))
            self._note_failure(sampler, kind, reason)
            if kind == _FAILURE_EXITED:
                return
            failures += 1
            sampler.stop.wait(max(_backoff(failures), min(self.dump_every_s, MAX_BACKOFF_S)))

    # --- results, under the lock -----------------------------------------------------------------

    def _current_state(self, sampler: _ProcessSampler) -> _ProcessState | None:
        """The pid's state, unless ``sampler`` was retired (its pid dropped, or dropped and re-added)."""
        if self._samplers.get(sampler.pid) is not sampler:
            return None
        return self._states.get(sampler.pid)

    def _window_gone(self, sampler: _ProcessSampler, epoch: int) -> None:
        """A record window ended with nothing to deliver: a mark need not wait for it."""
        with self._lock:
            self._window_in(sampler.pid, epoch)

    def _window_in(self, pid: int, epoch: int) -> None:
        """Under the lock: a window of ``epoch`` is in. One from before the latest wake is the one the mark
        waits for (a window after it may end first: py-spy notices SIGINT only at its next sample)."""
        if epoch < self._mark_epochs.get(pid, 0):
            self._awaiting_cut.discard(pid)

    def _deliver_window(self, sampler: _ProcessSampler, window: _Window) -> None:
        worker = any(is_worker_stack(c.frames) for c in window.counts)
        with self._lock:
            self._window_in(sampler.pid, window.epoch)
            state = self._current_state(sampler)
            if state is None:
                return
            self._windows.append(window)
            state.is_worker = state.is_worker or worker

    def _deliver_dump(self, sampler: _ProcessSampler, threads: list[ThreadStack]) -> None:
        worker = any(is_worker_stack(t.frames) for t in threads)
        with self._lock:
            state = self._current_state(sampler)
            if state is None:
                return
            dumped_at = time.time()
            state.threads = tuple(dataclasses.replace(t, dumped_at=dumped_at) for t in threads)
            state.is_worker = state.is_worker or worker
            self._remember_activity(threads)
            self._mark_ok(state)

    def _note_success(self, sampler: _ProcessSampler, behind: bool) -> None:
        with self._lock:
            state = self._current_state(sampler)
            if state is None:
                return
            self._mark_ok(state)
            if behind and not state.behind_reported:
                state.behind_reported = True
                self._events.append(
                    f"PID {sampler.pid}: py-spy fell behind {self.rate_hz:g} Hz; the achieved rate is lower"
                )

    def _note_killed(self, sampler: _ProcessSampler, mode: str, signal_name: str, delay_s: float) -> None:
        """A py-spy child died of a signal gputop did not send: not the target's fault, so the process's
        status stands; say so, with how often it happened, every time."""
        with self._lock:
            state = self._current_state(sampler)
            if state is None or state.status == _STATUS_EXITED:
                return
            state.restarts += 1
            times = "once" if state.restarts == 1 else f"{state.restarts} times"
            self._events.append(
                f"py-spy {mode} of PID {sampler.pid} was killed by {signal_name} (not by gputop), {times} so far; "
                f"restarting it in {delay_s:g} s. If it keeps dying, look for what kills it (dmesg for the OOM killer)"
            )

    @staticmethod
    def _mark_ok(state: _ProcessState) -> None:
        if state.status != _STATUS_EXITED:
            state.status, state.reason, state.consecutive_other_failures = _STATUS_OK, None, 0
            state.failure_kind = None

    def _note_failure(self, sampler: _ProcessSampler, kind: str, reason: str) -> None:
        with self._lock:
            state = self._current_state(sampler)
            if state is None or state.status == _STATUS_EXITED:
                return
            if kind == _FAILURE_EXITED:
                state.status, state.reason, state.threads = _STATUS_EXITED, reason, ()
                self._events.append(reason)
                return
            if kind == _FAILURE_OTHER:
                state.consecutive_other_failures += 1
                if state.consecutive_other_failures <= TRANSIENT_FAILURES_TOLERATED:
                    self._events.append(reason)
                    return
            state.status, state.reason, state.failure_kind = _STATUS_FAILING, reason, kind


def _backoff(failures: int) -> float:
    return min(MAX_BACKOFF_S, 2.0 ** (failures - 1))


def _read(path: str) -> str:
    """A py-spy output or log file; empty when it was never written."""
    return read_text(path) or ""


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 64):
            pass
    except (BlockingIOError, OSError):
        pass


def _remove(path: str) -> None:
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
