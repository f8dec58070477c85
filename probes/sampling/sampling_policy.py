"""The stack sampler's policy: how fast to sample one process, in windows of what length, how often to dump.

Pure: no processes, no files, no clock. The stack sampler (probes/sampling/pyspy.py) asks a :class:`SamplingPolicy`
for the next record window's rate and length and the wait before the next dump, and tells it what each
finished window showed; tests drive it the same way, with no py-spy.

The policy, per process:

* Look closely first: ``rate_hz`` (5 Hz by default) in short windows, 1 s and doubling up to
  ``max_window_s``. ``py-spy record`` writes nothing until a window ends, so short windows make the first
  verdict come fast and longer ones spread py-spy's start-up cost (see probes/sampling/pyspy.py).
* Settle: once a full-length window shows the same dominant position (innermost busy function and file,
  known waits left out) as the window before it, sample at ``settled_rate_hz`` (1 Hz) in
  ``settled_window_s`` windows (10 s) and dump every ``settled_dump_every_s`` (15 s): py-spy's cost to the
  target grows with threads x rate, and a picture that holds still needs few samples.
* Go back: a settled window whose dominant position differs from the previous one restores the fast rate
  and short windows, so the change is looked at closely.
* Wake: a settled window only reports at its end, 10 s later, so waiting for it to disagree makes a verdict
  lag a change of phase by over 6 s. The per-tick readings the engine takes anyway (CPU%, the main thread's
  CPU and wake-ups, I/O rates, the process set) move at once when the phase does: the
  :class:`PhaseChangeDetector` watches them, and when they move the sampler calls :meth:`SamplingPolicy.wake`,
  which goes back to the fast rate at once, looks again at four times that rate until ``look_again_samples``
  samples are in (enough for a verdict, diagnose's THIN_SAMPLES), and starts a new epoch: the running window,
  ended early by the sampler, mixes both phases and is not compared with what follows.

* Check the stacks: a change of phase that moves none of those readings (a main thread at 100% CPU that leaves a
  pure-Python tokenizer for torch ops on the same thread) would still wait for the settled window's end. So,
  with ``stack_check_every_s`` set, a process is dumped that often once two windows since the last wake are in,
  settled or not (the dump the sampler takes anyway for idle flags, only more often), and
  :meth:`SamplingPolicy.stack_check` compares where the dump caught the
  main thread (its innermost (function, file)) with every function the main thread's sampled stacks passed
  through in the last ``SEEN_WINDOWS`` windows since the last wake (callers too: a steady loop's dumps often
  catch it between calls, in a caller such as ``Tensor.backward`` that samples only saw further out; and many
  windows, since a settled one holds ten samples and a training step has rare leaves such as
  ``cross_entropy``). A function never seen there, ``STACK_CHECK_CONFIRMATIONS`` dumps in a row (each
  ``CONFIRM_AFTER_S`` after the one before), means the phase moved: the sampler wakes that process. So do
  ``SPINE_CONFIRMATIONS`` dumps in a row outside the latest window's spine (the functions every whole sample of it
  ran inside, such as a ``prepare_dataset`` around the tokenizer): a phase the windows saw before the current one
  (a warm-up step sampled in the first windows, before any check ran) is no longer unseen when it comes back, yet
  its dumps all leave the current phase's spine (issue 31: beside two busy processes, a warm-up step caught in the
  first windows hid a switch back to training for 10 to 19 s). After a wake, dumps come at the checks' cadence
  before the checks resume, so the first check follows the windows since the wake at once.

With ``settled_rate_hz`` None (a rate the user fixed) it never settles and a wake keeps the rate, only the
windows shorten; nor are the stacks checked, since the windows stay short.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from probes.frame import StackCount, ThreadStack
from probes.stack_identity import is_library, is_main_thread

DEFAULT_RATE_HZ = 5.0
# Once a process's picture has settled sampling drops to this rate. The overhead benchmark (docs/benchmarks.md) chose
# these: py-spy's cost to the target grows with threads x rate.
SETTLED_RATE_HZ = 1.0
DEFAULT_DUMP_EVERY_S = 5.0
FIRST_WINDOW_S = 1.0
MAX_WINDOW_S = 5.0
SETTLED_WINDOW_S = 10.0
SETTLED_DUMP_EVERY_S = 15.0
# After a wake: this many samples at LOOK_AGAIN_RATE_FACTOR x the fast rate, in first-length windows, so that
# a verdict on the new phase does not wait for 10 samples at 5 Hz (2 s on average, 3 s one time in ten:
# py-spy spaces samples at random). 4x (20 Hz in a 1 s window) rather than 2x: at 10 Hz a 1 s window often
# brought 9 samples (seen on a crowded machine), one short of a verdict, and the verdict waited a second window;
# the number in a window is about Poisson, below 10 about half the time at 10 Hz and 1 time in 200 at 20 Hz.
# About 0.25 core-second per wake on a 100-thread target.
LOOK_AGAIN_SAMPLES = 10
LOOK_AGAIN_RATE_FACTOR = 4.0
# A dump of each process at most this often checks its main thread is still where the windows
# saw it (see the module docstring), within STACK_CHECK_CPU_BUDGET (stack_check_interval_s).
STACK_CHECK_EVERY_S = 1.0
# The CPU all stack checks of a sampler may cost together, in cores: STACK_CHECK_CPU_BUDGET for one process,
# falling towards NODE_STACK_CHECK_CPU_BUDGET as more are checked (stack_check_budget_cores). A dump's cost grows
# with the target's threads: measured here ~0.01 core-seconds on a one-thread loop, ~0.04 beside 100 idle
# threads. So a lone one-thread process is checked every second and a lone 100-thread one every 2 s; a node's
# eight ranks (with the launcher, nine checked) share 0.011 core: ~0.014 core-s dumps every ~11 s each. The ranks
# of a job change phase together and each has its own cheap signals; on a node's job the checks were a quarter of
# all sampling (0.018 of 0.074 core at 0.02).
STACK_CHECK_CPU_BUDGET = 0.02
NODE_STACK_CHECK_CPU_BUDGET = 0.01
# A dump at a function the recent windows never saw is confirmed by more this soon after it, before the
# process is woken: a wake costs ~0.25 core-second on a 100-thread target, a confirmation dump a sixth of that.
CONFIRM_AFTER_S = 0.2
# Dumps in a row at unseen functions. With two, a steady MLP loop beside 100 threads still woke about once a
# minute (its windows had seen 17 functions; a dump caught an unseen one 4 times in 31); each more costs
# CONFIRM_AFTER_S of latency and multiplies the false rate by that chance again.
STACK_CHECK_CONFIRMATIONS = 3
# The windows whose main-thread functions a dump is compared with: about two minutes of settled windows; and
# the fewest since a wake before dumps are compared with them (the look-again window and one more).
SEEN_WINDOWS = 12
MIN_CHECKED_WINDOWS = 2
# A window's spine stands alone once it rests on this many whole samples of the main thread (a settled window holds
# about ten; one that held the end of the phase before has a shallower spine, and the next window's is the phase's
# own); on fewer (a 1 s window on a crowded machine brought 4) only what the window before shares with it counts.
# On 8 samples, a function the main thread runs inside 90% of the time still makes the spine 4 times in 10 (0.9^8),
# and a dump then falls outside it 1 time in 10: SPINE_CONFIRMATIONS keeps its short stretches outside from waking.
SPINE_MIN_SAMPLES = 8
# Dumps in a row outside the spine, where one of them is at a function the windows saw: one more than
# STACK_CHECK_CONFIRMATIONS, so that they span about 0.7 s (three gaps of CONFIRM_AFTER_S and the dumps' own time).
# A loop's excursion from its step (a slow batch fetched outside train_step) also leaves the spine: with three, a
# loop stepping out of train_step for 0.5 s every 5 s woke once in 150 s; a phase lasts longer than such a stretch.
SPINE_CONFIRMATIONS = STACK_CHECK_CONFIRMATIONS + 1


def stack_check_budget_cores(checked_processes: int) -> float:
    """What the stack checks of ``checked_processes`` may cost together, in cores: the whole
    STACK_CHECK_CPU_BUDGET for one, falling towards NODE_STACK_CHECK_CPU_BUDGET as more share it."""
    share = STACK_CHECK_CPU_BUDGET - NODE_STACK_CHECK_CPU_BUDGET
    return NODE_STACK_CHECK_CPU_BUDGET + share / max(1, checked_processes)


def stack_check_interval_s(dump_cpu_s: float | None, checked_processes: int,
                           every_s: float = STACK_CHECK_EVERY_S) -> float:
    """Seconds between one process's stack checks so that ``checked_processes`` of them, each dump costing
    ``dump_cpu_s`` (None: not measured yet), cost at most stack_check_budget_cores together; never under
    ``every_s``."""
    if not dump_cpu_s or dump_cpu_s <= 0:
        return every_s
    checked = max(1, checked_processes)
    return max(every_s, checked * dump_cpu_s / stack_check_budget_cores(checked))


@dataclass(frozen=True)
class WindowPlan:
    """One record window: its rate and length, and the policy's epoch when it started."""

    rate_hz: float
    seconds: float
    epoch: int


Position = tuple[str, str]  # (function, file) of a frame


class SamplingPolicy:
    """One process's sampling rate, window length and dump cadence; see the module docstring.

    Not thread-safe: the sampler calls it under its own lock.
    """

    def __init__(
        self,
        rate_hz: float = DEFAULT_RATE_HZ,
        settled_rate_hz: float | None = None,
        *,
        first_window_s: float = FIRST_WINDOW_S,
        max_window_s: float = MAX_WINDOW_S,
        settled_window_s: float = SETTLED_WINDOW_S,
        dump_every_s: float = DEFAULT_DUMP_EVERY_S,
        settled_dump_every_s: float = SETTLED_DUMP_EVERY_S,
        look_again_samples: int = LOOK_AGAIN_SAMPLES,
        stack_check_every_s: float | None = None,
    ) -> None:
        self.fast_rate_hz = float(rate_hz)
        self.settled_rate_hz = float(settled_rate_hz) if settled_rate_hz is not None else None
        self.first_window_s = first_window_s
        self.max_window_s = max(max_window_s, first_window_s)
        self.settled_window_s = settled_window_s
        self.dump_every_s = dump_every_s
        self.settled_dump_every_s = settled_dump_every_s
        self.look_again_samples = look_again_samples
        self.rate_hz = self.fast_rate_hz  # of the next record window (before any look-again boost)
        self.window_s = first_window_s  # length of the next record window
        self.epoch = 0  # bumped by every wake: windows started before it describe the earlier phase
        self._look_again_left = 0  # samples still wanted at the boosted rate since the last wake
        self._previous_picture: Hashable | None = None
        # Checking the stacks: the dump cadence (None: no checks), whether this process is
        # checked (the sampler turns it off for DataLoader workers: the parent's main thread shows their
        # changes), the functions on the main thread's stacks per recent window since the last wake, and unseen
        # dumps in a row.
        self.stack_check_every_s = stack_check_every_s
        self.check_stacks = True
        self._recent_positions: deque[frozenset[Position]] = deque(maxlen=SEEN_WINDOWS)
        # The spines (main_thread_spine) of the latest windows since the last wake: a dump outside the latest one's
        # left the phase it shows, whether or not an older window saw where it went (_spine_left).
        self._recent_spines: deque[MainSpine] = deque(maxlen=MIN_CHECKED_WINDOWS)
        self._unseen_in_a_row = 0
        self._only_off_spine = False  # a dump of the streak was outside the spine at a function the windows saw

    @property
    def settled(self) -> bool:
        """Sampling at the settled rate (the picture has held still)."""
        return self.rate_hz != self.fast_rate_hz

    @property
    def looking_again(self) -> bool:
        """Since a wake, fewer than ``look_again_samples`` samples have been taken."""
        return self._look_again_left > 0

    def next_window(self) -> WindowPlan:
        """The record window to start now."""
        if self.looking_again:
            return WindowPlan(self.fast_rate_hz * LOOK_AGAIN_RATE_FACTOR, self.first_window_s, self.epoch)
        return WindowPlan(self.rate_hz, self.window_s, self.epoch)

    def wake(self) -> None:
        """The cheap signals say the picture may have moved: look closely again, at once. The sampler ends the
        running window early (its samples still count, but not as this process's picture)."""
        self.epoch += 1
        self.rate_hz, self.window_s = self.fast_rate_hz, self.first_window_s
        self._previous_picture = None  # settling again takes two agreeing windows of the new phase
        self._look_again_left = self.look_again_samples
        self._recent_positions.clear()  # the functions of the phase before say nothing of the next one
        self._recent_spines.clear()
        self._unseen_in_a_row, self._only_off_spine = 0, False

    def window_finished(self, picture: Hashable | None, samples: int = 0, epoch: int | None = None,
                        main_positions: frozenset[Position] = frozenset(), moved_with_peers: bool = False,
                        main_spine: MainSpine | None = None) -> None:
        """A record window ended with ``samples`` samples; ``picture`` is its dominant position
        (probes.sampling.pyspy_output.dominant_position), ``epoch`` its plan's, ``main_positions`` every (function,
        file) on the main thread's sampled stacks (probes.sampling.pyspy_output.main_thread_positions),
        ``main_spine`` the functions every one of them ran inside (main_thread_spine). Decides the
        next window's rate and length. ``moved_with_peers``: a settled picture that moved to one its peers show
        (the sampler says so for a rank whose new picture another rank shows: the job's step caught at another
        moment) stays settled; the cheap signals and the stack checks still wake it on a change of its own."""
        if epoch is not None and epoch != self.epoch:
            return  # started before a wake: it straddles the change, so it says nothing about the new phase
        if main_positions:
            self._recent_positions.append(main_positions)
            self._recent_spines.append(main_spine or MainSpine((), 0))
        if self.looking_again:
            self._look_again_left = max(0, self._look_again_left - samples)
            self._previous_picture = picture
            return  # windows stay short until the new phase has been seen enough
        self.window_s = min(self.window_s * 2, self.max_window_s)
        if self.settled_rate_hz is None:
            return
        if self.window_s >= self.max_window_s and picture == self._previous_picture:
            self.rate_hz, self.window_s = self.settled_rate_hz, self.settled_window_s
        elif self.settled and not moved_with_peers:  # the picture moved: look closely again
            self.rate_hz, self.window_s = self.fast_rate_hz, self.first_window_s
        elif self.settled:
            self.window_s = self.settled_window_s
        self._previous_picture = picture

    @property
    def checking_stacks(self) -> bool:
        """Dumps check the main thread's position: checks on, an adaptive rate, not looking again after a wake,
        and at least MIN_CHECKED_WINDOWS windows since it to compare with. Not only while settled: a wake just
        before a stack-only change (a neighbour's load lifting) leaves fast windows whose verdict would mix the
        phases for up to 10 s; a check's wake cuts them at the change."""
        return (self.stack_check_every_s is not None and self.check_stacks and self.settled_rate_hz is not None
                and not self.looking_again and len(self._recent_positions) >= MIN_CHECKED_WINDOWS)

    @property
    def _checks_resume(self) -> bool:
        """Since a wake, checks are on but wait for the look-again window and one more (not at the start: there each
        process's budgeted cadence is not known yet, and a node's every process would dump each second)."""
        return (self.epoch > 0 and self.check_stacks and self.settled_rate_hz is not None
                and (self.looking_again or len(self._recent_positions) < MIN_CHECKED_WINDOWS))

    def stack_check(self, main_position: Position | None, main_stack: Sequence[Position] = ()) -> str | None:
        """A dump caught the main thread at ``main_position`` (innermost), with ``main_stack`` every (function, file)
        on its stack, outermost first (main_thread_stack). When it and the dumps just before it
        (STACK_CHECK_CONFIRMATIONS in all) lie in functions no recent window saw on the main thread's stack, or
        (SPINE_CONFIRMATIONS in all, where one of them is at a function a window saw) outside the latest window's
        spine (_spine_left), the phase moved: say how (one line; the sampler wakes the process). None otherwise, and
        when not checking."""
        left = self._spine_left(main_stack)
        unseen = main_position is not None and not any(main_position in seen for seen in self._recent_positions)
        if not self.checking_stacks or main_position is None or not (unseen or left is not None):
            self._unseen_in_a_row, self._only_off_spine = 0, False
            return None
        self._unseen_in_a_row += 1
        self._only_off_spine = self._only_off_spine or not unseen
        needed = SPINE_CONFIRMATIONS if self._only_off_spine else STACK_CHECK_CONFIRMATIONS
        if self._unseen_in_a_row < needed:
            return None
        self._unseen_in_a_row, self._only_off_spine = 0, False
        before = _describe_position(self._previous_picture)
        outside = f", outside {_describe_position(left)}" if left is not None else ""
        return (f"main thread's stack moved ({before} → {_describe_position(main_position)}{outside}, "
                f"{needed} dumps in a row)")

    def _spine_left(self, main_stack: Sequence[Position]) -> Position | None:
        """The innermost function of the latest window's spine (with fewer than SPINE_MIN_SAMPLES samples, of what
        it shares with the window before) that a whole dump of the main thread (one that reaches the spine's
        outermost frame: a stack py-spy caught half-built says nothing) ran outside; None where it ran inside all of
        it, or there is no spine to compare with."""
        if not self._recent_spines or not main_stack:
            return None
        latest = self._recent_spines[-1]
        spine = latest.positions
        if latest.samples < SPINE_MIN_SAMPLES:
            if len(self._recent_spines) < 2:
                return None
            before = self._recent_spines[-2].positions
            spine = tuple(p for p in spine if p in before) if before[:1] == spine[:1] else ()
        elif len(self._recent_spines) >= 2 and _held_the_change(self._recent_spines[-2], latest):
            spine = self._recent_spines[-2].positions
        if len(spine) < 2 or spine[0] != main_stack[0]:
            return None  # no spine beyond the script's outermost frame, or a dump that does not reach it
        on_stack = set(main_stack)
        return next((p for p in reversed(spine) if p not in on_stack), None)

    def dump_wait_s(self) -> float:
        """Seconds to wait after a dump before the next one."""
        if self.checking_stacks:
            return CONFIRM_AFTER_S if self._unseen_in_a_row else float(self.stack_check_every_s or 0.0)
        if self._checks_resume and self.stack_check_every_s is not None:
            # Dumps at the checks' cadence while the windows since a wake come in, so that the first check follows
            # them within a second, not a dump interval later. Beside two busy processes a neighbour's load woke the
            # sampler 2 s before a stack-only switch; the next dump came 5 s after the wake, when the windows since it
            # already held the new phase, and the verdict waited 10 s for them to outweigh the old one (issue 31).
            return float(self.stack_check_every_s)
        if self.settled:
            return max(self.dump_every_s, self.settled_dump_every_s)
        return self.dump_every_s


def _held_the_change(before: MainSpine, latest: MainSpine) -> bool:
    """The latest window's samples left part of the spine the window before held whole: its spine is that one's,
    cut short. Such a window straddled a change of phase (a settled 10 s window whose last seconds were the next
    phase), and its spine and functions hold the new phase as if seen: dumps are judged by the window before's
    spine, or the change would wait for the next window's end (beside two busy processes, 8.5 s after the switch)."""
    return (before.samples >= SPINE_MIN_SAMPLES and len(before.positions) > len(latest.positions)
            and before.positions[:len(latest.positions)] == latest.positions)


class MainSpine(NamedTuple):
    """What every whole sample of a window's main thread ran inside (outermost first), and how many samples."""

    positions: tuple[Position, ...]
    samples: int


def main_thread_spine(counts: Sequence[StackCount], pid: int) -> MainSpine:
    """The (function, file) of every frame of the user's own code that each whole sample of ``pid``'s main thread in
    a window ran inside, outermost first: the script's outermost frame, its main loop and, where the whole window
    spent its time in one phase, that phase's function (``prepare_dataset``). A sample is whole when its outermost
    frame is the one most samples have: a stack py-spy caught half-built (a lone leaf) would otherwise empty the
    spine. Library frames are left out: a steady loop's samples can all fall in one of torch's (a window of 9 all in
    ``_engine_run_backward`` woke a steady loop whose dumps then caught forward and the optimizer)."""
    stacks = [c for c in counts if c.frames and is_main_thread(c.pid, c.tid, c.thread_name, c.frames, pid)]
    if not stacks:
        return MainSpine((), 0)
    roots: dict[Position, int] = {}
    for count in stacks:
        root = (count.frames[-1].function, count.frames[-1].file)
        roots[root] = roots.get(root, 0) + count.count
    root = max(roots, key=roots.__getitem__)
    whole = [c for c in stacks if (c.frames[-1].function, c.frames[-1].file) == root]
    common = set.intersection(*({(f.function, f.file) for f in c.frames} for c in whole))
    spine: list[Position] = []
    for frame in reversed(whole[0].frames):
        position = (frame.function, frame.file)
        if position in common and position not in spine and (not spine or not is_library(frame)):
            spine.append(position)
    return MainSpine(tuple(spine), sum(c.count for c in whole))


def main_thread_stack(threads: Sequence[ThreadStack], pid: int) -> tuple[Position, ...]:
    """Every (function, file) on the stack a dump caught ``pid``'s main thread in, outermost first (empty: none)."""
    for thread in threads:
        if thread.frames and is_main_thread(thread.pid, thread.tid, thread.name, thread.frames, pid):
            return tuple((f.function, f.file) for f in reversed(thread.frames))
    return ()


def _describe_position(position: Hashable | None) -> str:
    """'tokenize_text (phase_switch.py)' for a (function, file) position."""
    if isinstance(position, tuple) and len(position) == 2:
        function, file = position
        return f"{function} ({str(file).rsplit('/', 1)[-1]})"
    return "waits only" if position is None else str(position)


# --- when the picture may have moved -----------------------------------------------------------------------

# How many recent ticks each signal is compared with, and how many it needs before it may fire.
DETECTOR_HISTORY_TICKS = 10
DETECTOR_MIN_HISTORY = 5
# A process's CPU% (or its main thread's, or the main thread's time queued for a core) must move from its
# recent median by this step, in percent of a core, plus the spread (max - min) of its recent ticks, or two of
# them by the step plus half their spread: a steady but noisy job's spread grows with its noise, so its jitter
# does not look like a change, while a quiet one is caught at a quarter of a core. (Measured on a saturated
# 2-core machine: a main thread going from a Python loop to torch ops on two threads went from 64% to 28% CPU
# and from 35% to 70% queued, while the process stayed at 60%.)
CPU_MOVE_PCT = 25.0
SPREAD_FACTOR = 0.5
# Two kinds of reading moving together need less each: on a machine so crowded that the target gets half a
# core, the same switch moved the main thread from 49% to 25% CPU and from 51% to 74% queued.
WEAK_STEP_FACTOR = 0.6
# Or one reading moving that far (0.6x the step plus half its spread) on two ticks in a row, on the same side:
# jitter rarely does that twice, a phase always does. Measured beside two busy processes and other load on
# 2 cores: the main thread went from ~51% ± 8 on a CPU to 30%, 26%, 24%, and its queued time from ~48% to 67%,
# 69%, 71%, each tick just inside the rules above, and the switch went unseen for 20 s.
# The main thread's share of its process's CPU is judged like CPU% (in points), once the process uses this much
# of a core: below it, the kernel's 10 ms ticks make the share jump about.
SHARE_MIN_CPU_PCT = 5.0
# Wake-ups and I/O are compared on a log2 scale above a floor (rates below it count as the floor): a 4x change.
RATE_MOVE_LOG2 = 2.0
WAKEUPS_FLOOR_PER_S = 50.0
IO_FLOOR_BYTES_PER_S = 1 << 20


@dataclass(frozen=True)
class PhaseSignals:
    """The cheap readings of one process, taken each tick, that move when its phase does."""

    cpu_pct: float | None = None
    main_thread_cpu_pct: float | None = None
    main_thread_runqueue_pct: float | None = None  # runnable but waiting for a core, percent of wall time
    wakeups_per_s: float | None = None  # the main thread's voluntary context switches
    io_bytes_per_s: float | None = None  # read + written (rchar, wchar) and TCP, all together

    @property
    def main_thread_share_pct(self) -> float | None:
        """The main thread's share of its process's CPU. Unlike CPU% it does not shrink when other work crowds
        the machine: a main thread leaving a Python loop for torch's worker threads goes from ~100% to ~50%
        whether the process gets two cores or a seventh of one (seen: 14% → 8% of a core, 16% the process)."""
        if self.cpu_pct is None or self.main_thread_cpu_pct is None or self.cpu_pct < SHARE_MIN_CPU_PCT:
            return None
        return min(100.0, 100.0 * self.main_thread_cpu_pct / self.cpu_pct)


def _scaled(name: str, value: float) -> float:
    """The value on the scale its moves are judged on."""
    if name == "wakeups_per_s":
        return math.log2(max(value, WAKEUPS_FLOOR_PER_S))
    if name == "io_bytes_per_s":
        return math.log2(max(value, IO_FLOOR_BYTES_PER_S))
    return value


_MOVE_THRESHOLDS = {
    "cpu_pct": CPU_MOVE_PCT,
    "main_thread_cpu_pct": CPU_MOVE_PCT,
    "main_thread_runqueue_pct": CPU_MOVE_PCT,
    "main_thread_share_pct": CPU_MOVE_PCT,
    "wakeups_per_s": RATE_MOVE_LOG2,
    "io_bytes_per_s": RATE_MOVE_LOG2,
}
# The process's CPU and its main thread's are one kind: in a one-thread process they are the same reading.
_KINDS = {
    "cpu_pct": "cpu",
    "main_thread_cpu_pct": "cpu",
    "main_thread_runqueue_pct": "queue",
    "main_thread_share_pct": "share",
    "wakeups_per_s": "wakeups",
    "io_bytes_per_s": "io",
}
_LABELS = {
    "cpu_pct": "CPU",
    "main_thread_cpu_pct": "main thread CPU",
    "main_thread_runqueue_pct": "main thread queued for a core",
    "main_thread_share_pct": "main thread's share of the process's CPU",
    "wakeups_per_s": "main thread wake-ups",
    "io_bytes_per_s": "I/O",
}


class PhaseChangeDetector:
    """Tells, from each tick's :class:`PhaseSignals` per process, when the stack picture may have moved.

    Pure and cheap (a few comparisons per process per tick, on readings already taken). A signal moved when its
    latest value lies further from the median of its recent ticks than a fixed step (CPU_MOVE_PCT, or 4x for
    rates) plus those ticks' spread, or two kinds of signal at once by 0.6x the step plus half their spread; a process
    appearing or going also counts. After a move the
    recent ticks are forgotten: the next ticks are the new phase settling in, and comparing them with the old
    one would fire again and again. ``now`` (seconds, any monotonic clock) only orders the observations.

    ``steady`` processes (alike DataLoader workers taking turns, probes/sampling/tree_sampling.py) count as moved only
    when
    they moved on two ticks running: on a busy machine a worker's queued time jitters past its step every few
    seconds, and each call-up of one cost a py-spy start and a fast look. A real change holds: it is seen a tick
    later. (A move of another process on the tick between clears the recent ticks; the worker is then still
    sampled in its turn.)
    """

    def __init__(self, history_ticks: int = DETECTOR_HISTORY_TICKS, min_history: int = DETECTOR_MIN_HISTORY) -> None:
        self.history_ticks = history_ticks
        self.min_history = min_history
        self._history: dict[int, dict[str, deque[float]]] = {}
        self._pids: frozenset[int] | None = None
        self._last_now: float | None = None
        self.moved_pids: frozenset[int] = frozenset()  # after observe(): the processes that moved or started
        self._unconfirmed: frozenset[int] = frozenset()  # steady processes that moved on the latest tick only

    def observe(self, now: float, signals: Mapping[int, PhaseSignals],
                steady: frozenset[int] | set[int] = frozenset()) -> str | None:
        """Take one tick's signals; why the picture may have moved (one line), or None when it holds. A process
        of ``steady`` moves only when it moved on the tick before too (see the class docstring)."""
        if self._last_now is not None and now < self._last_now:
            self.moved_pids = frozenset()
            return None  # out of order: ignore
        self._last_now = now
        pids = frozenset(signals)
        reason = self._process_set_moved(pids)
        # Every process that moved, not only the first: over a node's tree only they are called up at once
        # (probes/sampling/tree_sampling.py), so each must be named.
        moved = {pid: r for pid in sorted(signals) if (r := self._moved(pid, signals[pid])) is not None}
        held = {pid for pid in moved if pid in steady and pid not in self._unconfirmed}
        self._unconfirmed = frozenset(held)
        for pid in held:
            del moved[pid]
        if reason is None and moved:
            reason = next(iter(moved.values()))
        self.moved_pids = frozenset(moved) | (pids - self._pids if self._pids is not None else frozenset())
        self._pids = pids
        if reason is not None:
            self._history.clear()
            return reason
        for pid, reading in signals.items():
            per_signal = self._history.setdefault(pid, {})
            for name in _MOVE_THRESHOLDS:
                value = getattr(reading, name)
                if value is not None:
                    per_signal.setdefault(name, deque(maxlen=self.history_ticks)).append(_scaled(name, value))
        for pid in [p for p in self._history if p not in pids]:
            del self._history[pid]
        return None

    def _process_set_moved(self, pids: frozenset[int]) -> str | None:
        if self._pids is None or pids == self._pids:
            return None
        started, ended = sorted(pids - self._pids), sorted(self._pids - pids)
        parts = []
        if started:
            parts.append(f"process{'es' if len(started) > 1 else ''} {', '.join(map(str, started[:4]))} started")
        if ended:
            parts.append(f"process{'es' if len(ended) > 1 else ''} {', '.join(map(str, ended[:4]))} ended")
        return " and ".join(parts)

    def _moved(self, pid: int, reading: PhaseSignals) -> str | None:
        per_signal = self._history.get(pid, {})
        weak: dict[str, str] = {}  # kind of signal -> what moved
        persisting: str | None = None  # a reading beyond its jitter two ticks running
        for name, step in _MOVE_THRESHOLDS.items():
            value = getattr(reading, name)
            recent = per_signal.get(name)
            if value is None or recent is None or len(recent) < self.min_history:
                continue
            median, spread = _jitter(recent)
            scaled = _scaled(name, value)
            move = abs(scaled - median)
            if move >= step + spread:  # beyond anything its recent jitter explains
                return f"PID {pid}: {_move_line(name, median, value)}"
            if move >= WEAK_STEP_FACTOR * step + SPREAD_FACTOR * spread and _KINDS[name] not in weak:
                weak[_KINDS[name]] = _move_line(name, median, value)
            if persisting is None:
                persisting = _persisting_move(name, recent, scaled, step)
        if len(weak) >= 2:  # two kinds of reading moving at once, each well beyond half its jitter
            return f"PID {pid}: " + ", ".join(weak.values())
        if persisting is not None:
            return f"PID {pid}: {persisting}"
        return None


def _move_line(name: str, median: float, value: float) -> str:
    """What moved, for the reason a move gives: built only for a move (the detector runs every tick for every
    process and signal, and most ticks nothing moves)."""
    return f"{_LABELS[name]} moved ({_describe(name, median)} → {_describe(name, value, True)})"


def _jitter(recent: Sequence[float]) -> tuple[float, float]:
    """(median, spread) of a signal's recent ticks; the spread leaves out the tick furthest from the median, so
    that the tick a switch fell in (part-way to the new level) does not hide the next, full one.

    One sort (this runs for every process and signal, twice a tick): the tick furthest from the median is the
    lowest or the highest, so the spread is the sorted ticks' range less that end. When both ends lie equally far,
    the one left out is the later tick, as a stable sort by distance (what this did before) leaves it last.
    """
    ordered = sorted(recent)
    half = len(ordered) // 2
    median = ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2
    low, high = ordered[0], ordered[-1]
    below, above = median - low, high - median
    if below == above:
        drop_high = below > 0 and next(x for x in reversed(recent) if x in (low, high)) == high
    else:
        drop_high = above > below
    if drop_high:
        return median, ordered[-2] - low
    return median, high - ordered[1]


def _persisting_move(name: str, recent: Sequence[float], scaled_value: float, step: float) -> str | None:
    """The reading and the tick before it both lie beyond 0.6x the step plus half the spread of the ticks
    before them, on the same side: the line saying so, else None."""
    if len(recent) < DETECTOR_MIN_HISTORY + 1:
        return None
    older, previous = list(recent)[:-1], recent[-1]
    median, spread = _jitter(older)
    threshold = WEAK_STEP_FACTOR * step + SPREAD_FACTOR * spread
    moves = (previous - median, scaled_value - median)
    if min(abs(m) for m in moves) < threshold or (moves[0] > 0) != (moves[1] > 0):
        return None
    return f"{_LABELS[name]} moved ({_describe(name, median)} → {_describe(name, previous)}, " \
           f"{_describe(name, scaled_value)}: two ticks)"


def _describe(name: str, value: float, raw: bool = False) -> str:
    if name in ("wakeups_per_s", "io_bytes_per_s") and not raw:
        value = 2.0 ** value
    if name == "wakeups_per_s":
        return f"{value:.0f}/s"
    if name == "io_bytes_per_s":
        return f"{value / (1 << 20):.1f} MiB/s"
    return f"{value:.0f}%"
