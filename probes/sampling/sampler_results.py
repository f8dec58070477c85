"""What the stack sampler has gathered and not yet handed out, and the state of each sampled process.

:class:`SamplerResults` owns, between two ``collect()`` calls: the finished record windows, the one-off errors, each
process's state (sampling, failing and why, exited; its latest dump's threads; its GIL windows; whether it is a
DataLoader worker), and the phase mark a wake puts on the next reading: which windows belong before it, and which the
mark waits for (see probes/sampling/pyspy.py). It runs nothing: the per-process loops
(probes/sampling/process_sampler.py) deliver into it, the coordinator (probes/sampling/pyspy.py) takes from it. It
is not thread-safe: every method is called under the sampler's lock.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from probes.frame import GilSamples, StackCount, ThreadStack
from probes.sampling.pyspy_binary import FAILURE_EXITED, FAILURE_NOT_PYTHON, FAILURE_OTHER, FAILURE_PERMISSION

# After a wake, the phase mark waits for the windows it ended early at most this long (less than a tick, so the
# mark lands on the next tick and the first window of the new phase, a second long, is not held back). py-spy
# writes a window only at its next sample after SIGINT: at 1 Hz that can take seconds. A window that comes
# after its mark is dropped: its samples straddle the change and would hold the old verdict.
CUT_WINDOW_WAIT_S = 0.8
# A process counts as failing after this many "other" failures in a row: nonblocking reads of a
# running process occasionally fail once, which should not flip the whole reading to unavailable.
TRANSIENT_FAILURES_TOLERATED = 1

STATUS_STARTING = "starting"
STATUS_OK = "ok"
STATUS_FAILING = "failing"
STATUS_EXITED = "exited"


@dataclass
class Window:
    """One finished record window of one process."""

    pid: int
    counts: list[StackCount]
    samples: int
    wall_seconds: float
    epoch: int = 0  # the process's policy epoch when the window started
    started: float = 0.0  # time.time() when it started
    rate_hz: float | None = None  # the rate py-spy was asked for
    sampled_seconds: float | None = None  # of wall_seconds, the part after py-spy's start-up (None: not seen)


@dataclass
class ProcessState:
    """One sampled process as its loops last found it."""

    status: str = STATUS_STARTING
    reason: str | None = None
    failure_kind: str | None = None  # the FAILURE_* of the failure that made it failing
    consecutive_other_failures: int = 0
    threads: tuple[ThreadStack, ...] = ()
    rate_hz: float | None = None
    is_worker: bool = False
    behind_reported: bool = False
    restarts: int = 0  # py-spy children killed by someone else and started again
    gil: list[GilSamples] = field(default_factory=list)  # GIL windows finished since the last collect


@dataclass(frozen=True)
class Collected:
    """What one ``collect()`` takes: the windows that belong to this reading and what goes beside them."""

    windows: list[Window]
    counts: list[StackCount]  # the windows' counts, working and waiting as each window's pair measured them
    phase_change: str | None
    errors: tuple[str, ...]  # one-off errors, then why each failing process fails
    states: dict[int, ProcessState]  # each process's state (the objects, not copies)
    threads: tuple[ThreadStack, ...]  # the latest dump of each process that samples
    achieved_rate_hz: float | None
    gil: tuple[GilSamples, ...]


class SamplerResults:
    """The sampler's gathered results and process states; every method under the sampler's lock.

    A method given a ``state`` takes None for a process whose sampler was retired (dropped, or dropped and added
    again) since: what it delivers then goes nowhere.
    """

    def __init__(self) -> None:
        self.states: dict[int, ProcessState] = {}
        self._windows: list[Window] = []
        self._events: list[str] = []  # one-off errors since the last collect
        # Waking on a change of phase (see probes/sampling/sampling_policy.py): the mark the next reading carries
        # once the windows that were ended early are in.
        self._mark: str | None = None
        self._mark_since = 0.0
        self._mark_epochs: dict[int, int] = {}  # per pid, the first epoch after the wake
        self._awaiting_cut: set[int] = set()  # pids whose ended-early window has not been delivered yet
        self._marked_epochs: dict[int, int] = {}  # per pid, the epoch the latest mark put on a reading began

    # --- processes ----------------------------------------------------------------------------------

    def add_process(self, pid: int) -> None:
        """``pid``'s state, new."""
        self.states[pid] = ProcessState()

    def keep_process(self, pid: int) -> None:
        """``pid``'s state, new unless it has one."""
        self.states.setdefault(pid, ProcessState())

    def drop_process(self, pid: int) -> None:
        self.states.pop(pid)
        self._mark_epochs.pop(pid, None)
        self._marked_epochs.pop(pid, None)
        self._awaiting_cut.discard(pid)

    def worker_pids(self) -> set[int]:
        return {pid for pid, state in self.states.items() if state.is_worker}

    def event(self, text: str) -> None:
        """A one-off error for the next reading."""
        self._events.append(text)

    # --- the phase mark -----------------------------------------------------------------------------

    def woken(self, pid: int, epoch: int, await_window: bool) -> None:
        """A wake reached ``pid``, whose policy's epoch is now ``epoch``; ``await_window``: the mark waits for the
        window the wake ended."""
        self._mark_epochs[pid] = epoch
        if await_window:
            self._awaiting_cut.add(pid)

    def set_mark(self, reason: str, now: float) -> None:
        """The next reading carries ``reason`` (``now``: time.monotonic() of the wake)."""
        self._mark, self._mark_since = reason, now

    def window_in(self, pid: int, epoch: int) -> None:
        """A window of ``epoch`` is in (with samples or not). One from before the latest wake is the one the mark
        waits for (a window after it may end first: py-spy notices SIGINT only at its next sample)."""
        if epoch < self._mark_epochs.get(pid, 0):
            self._awaiting_cut.discard(pid)

    # --- deliveries ---------------------------------------------------------------------------------

    def add_window(self, state: ProcessState | None, window: Window, worker: bool) -> None:
        self.window_in(window.pid, window.epoch)
        if state is None:
            return
        self._windows.append(window)
        state.is_worker = state.is_worker or worker

    def add_dump(self, state: ProcessState | None, threads: list[ThreadStack], worker: bool) -> None:
        if state is None:
            return
        dumped_at = time.time()
        state.threads = tuple(dataclasses.replace(t, dumped_at=dumped_at) for t in threads)
        state.is_worker = state.is_worker or worker
        _mark_ok(state)

    def add_gil(self, state: ProcessState | None, gil: GilSamples) -> None:
        if state is not None:
            state.gil.append(gil)

    def note_success(self, pid: int, state: ProcessState | None, behind: bool, rate_hz: float) -> None:
        if state is None:
            return
        _mark_ok(state)
        if behind and not state.behind_reported:
            state.behind_reported = True
            self._events.append(f"PID {pid}: py-spy fell behind {rate_hz:g} Hz; the achieved rate is lower")

    def note_killed(self, pid: int, state: ProcessState | None, mode: str, signal_name: str, delay_s: float) -> None:
        """A py-spy child died of a signal gputop did not send: not the target's fault, so the process's
        status stands; say so, with how often it happened, every time."""
        if state is None or state.status == STATUS_EXITED:
            return
        state.restarts += 1
        times = "once" if state.restarts == 1 else f"{state.restarts} times"
        self._events.append(
            f"py-spy {mode} of PID {pid} was killed by {signal_name} (not by gputop), {times} so far; "
            f"restarting it in {delay_s:g} s. If it keeps dying, look for what kills it (dmesg for the OOM killer)"
        )

    def note_failure(self, state: ProcessState | None, kind: str, reason: str) -> None:
        if state is None or state.status == STATUS_EXITED:
            return
        if kind == FAILURE_EXITED:
            state.status, state.reason, state.threads = STATUS_EXITED, reason, ()
            self._events.append(reason)
            return
        if kind == FAILURE_OTHER:
            state.consecutive_other_failures += 1
            if state.consecutive_other_failures <= TRANSIENT_FAILURES_TOLERATED:
                self._events.append(reason)
                return
        state.status, state.reason, state.failure_kind = STATUS_FAILING, reason, kind

    # --- collecting ---------------------------------------------------------------------------------

    def collect(self) -> Collected:
        """Everything gathered since the previous collect, less the windows that wait for the reading after it."""
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
        states = dict(self.states)
        counts = [c for w in windows for c in w.counts]
        for window in windows:
            state = states.get(window.pid)
            if state is not None and window.wall_seconds > 0:
                state.rate_hz = window.samples / window.wall_seconds
        failing = [s.reason for s in states.values() if s.status == STATUS_FAILING and s.reason]
        threads = tuple(t for s in states.values() if s.status == STATUS_OK for t in s.threads)
        rates = [s.rate_hz for s in states.values() if s.rate_hz is not None and s.status == STATUS_OK]
        gil = []
        for state in states.values():
            gil.extend(state.gil)
            state.gil = []
        return Collected(
            windows=windows,
            counts=counts,
            phase_change=phase_change,
            errors=tuple(dict.fromkeys(events + failing)),
            states=states,
            threads=threads,
            achieved_rate_hz=round(sum(rates) / len(rates), 2) if rates else None,
            gil=tuple(gil),
        )


def _mark_ok(state: ProcessState) -> None:
    if state.status != STATUS_EXITED:
        state.status, state.reason, state.consecutive_other_failures = STATUS_OK, None, 0
        state.failure_kind = None


def availability(states: Mapping[int, ProcessState], unavailable_reason: str | None) -> tuple[bool, str | None]:
    """(whether stacks can be read, why not): ``unavailable_reason`` when py-spy itself cannot run."""
    if unavailable_reason is not None:
        return False, unavailable_reason
    if not states:
        return False, "no target process to sample"
    if any(s.status in (STATUS_STARTING, STATUS_OK) for s in states.values()):
        return True, None
    reasons = [s.reason for s in states.values() if s.reason]
    return False, "; ".join(dict.fromkeys(reasons)) or "no process could be sampled"


def blocked(states: Mapping[int, ProcessState], unavailable_reason: str | None, pyspy_found: bool) -> str | None:
    """A few words for why no process's stacks can be read at all, when that is the case: the verdict then
    says "cannot see" instead of guessing. None while a process is merely starting or has exited."""
    if unavailable_reason is not None:
        return "py-spy missing" if not pyspy_found else "py-spy does not run"
    kinds = {s.failure_kind for s in states.values() if s.status == STATUS_FAILING}
    for kind, words in ((FAILURE_PERMISSION, "ptrace denied"), (FAILURE_NOT_PYTHON, "not a Python process"),
                        (FAILURE_OTHER, "py-spy fails")):
        if kind in kinds:
            return words
    return None
