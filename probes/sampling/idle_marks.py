"""Which samples of the record windows were idle: the dumps' activity flags, counted by code position.

py-spy's raw output (the record windows) carries no idle flag; each dump gives every thread's current stack with
py-spy's ``active`` flag. :class:`IdleMarks` counts, for each innermost Python frame a dump caught a thread in, how
many dumps saw it idle there and how many saw it there at all (per thread, per process, for any thread), recent dumps
weighing more, and splits each window's count at that position by the idle share those dumps observed: a count
of 10 where 7 of 10 dumps saw the thread idle becomes 7 idle samples and 3 busy ones.

Why a share, not one flag per position: the same line can be both. At a rank's entry into backward (DDP on
gloo) the main thread computes its backward and then sleeps while DDP's reducer waits for the other ranks; a
flag per line ("busy wins": a line any dump caught running stays busy) counted every one of those waits as
compute once a single dump caught the rank computing, or woken and queued for a core on a busy machine (a rank
asleep 70% of the time measured waiting 0%, issue 31). The dumps are samples of the thread's state at moments
unrelated to its step, so the share of them that saw it idle at a position estimates the share of its time
there that it was idle, without bias, where the flag per line was biased to busy. The kernel's per-thread sleep
share (schedstat) is not used here: it says how long a thread slept, not where, so it cannot split one line's
samples from another's, and it is not measured everywhere (no run-queue time, no sleep told from waiting).

Whose dumps decide: the share at a line is a property of what one thread does there, so a thread's own dumps
decide wherever they caught it, even one dump against many of other threads. Where none did, the share is
borrowed, first from the same process's other threads at that line (pooled), then from any thread's, and a
borrowed share counts only where about five dumps' worth back it (MIN_BORROWED_WEIGHT), else the line is
unseen, so busy. Another thread's share is evidence about this one only through a shared role (a pool's threads,
a DataLoader's workers), and one or two dumps give a share of 0, ½ or 1 whatever the truth. The same process
comes before any other: its threads run one program under one GIL and are never each other's peer in a
collective, while the ranks of a job are separate processes that run the same lines and differ by design at the
collectives (one computes while the other waits for it): rank 0's one idle dump at backward's entry made rank 1,
the busy straggler, look 67% waiting at the end of an accelerate run when borrowed at once. A borrowed share backed by
enough dumps still stands (a DataLoader worker started anew takes its siblings' share); a straggler that spends
much time at a line soon has its own dumps there, which then decide.

A known blocking call (KNOWN_WAITS) is always idle, even when a dump caught the thread running there (waking up,
say); so is a line of Python that only sleeps (`time.sleep(0.5)`, read from the file the frame names where it is
on this disk): time.sleep is C code, no Python frame of its own, and a thread that sleeps there in a loop was
counted busy for a whole window where the one dump that saw it had caught it woken, queued for a core or the GIL
on a busy machine. A position no dump has seen (or too few to borrow from) is busy: threads wait at a few
recurring places that the dumps soon see, while busy code moves through many lines that a dump every few seconds
rarely catches.
The counts are bounded (least recently seen first out) and not thread-safe: the stack sampler calls them under
its lock.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from probes.frame import StackCount, StackFrame, ThreadStack
from probes.sampling.pyspy_output import KNOWN_WAITS
from probes.sampling.stacks import frame_matches
from probes.sensors.source_lines import line_in

# A line of Python that does nothing but sleep: time.sleep(…), asyncio's, or a sleep imported bare.
_SLEEP_LINE = re.compile(r"(?:await\s+)?(?:time\.|asyncio\.)?sleep\(")

# How many (thread, innermost frame) and innermost frame observations to remember for marking counts.
FRAME_ACTIVITY_MEMORY = 4096
# Each new dump at a position counts fully; the ones before it lose half their weight every this many dumps there.
# Dumps come every 5 s (15 s once settled), so a share follows about the last minute of dumps at a position,
# while some 20 dumps' worth of observations (an exponential average's effective count, (1 + w) / (1 - w)) keep a
# share of 0.7 within about ±0.1 (one standard deviation).
IDLE_HALF_LIFE_DUMPS = 8
RECENT_WEIGHT = 0.5 ** (1 / IDLE_HALF_LIFE_DUMPS)
# A share borrowed from other threads (a thread no dump caught at a line) counts only with at least this weight of
# observations behind it: five dumps in a row weigh 4.2 (1 + w + ... + w^4), four 3.5; a steady stream tends to 12
# (1 / (1 - w)). From five dumps a share of 0.5 is known within about ±0.2 (one standard deviation); from one or
# two it is 0, 0.5 or 1 whatever the truth.
MIN_BORROWED_WEIGHT = 4.0

Position = tuple[str, str, int]  # function, file, line of an innermost Python frame
_ThreadPosition = tuple[int, int, str, str, int]  # pid, tid, and a Position
_ProcessPosition = tuple[int, str, str, int]  # pid and a Position
_Key = TypeVar("_Key", bound=Hashable)
_Value = TypeVar("_Value")


def innermost_python(frames: Sequence[StackFrame]) -> StackFrame | None:
    return next((f for f in frames if not f.native), None)


@dataclass
class Observed:
    """The dumps that caught a thread at one position: how many saw it idle, of how many, recent ones weighing more."""

    idle: float = 0.0
    seen: float = 0.0

    def add(self, idle: bool) -> None:
        self.idle = self.idle * RECENT_WEIGHT + (1.0 if idle else 0.0)
        self.seen = self.seen * RECENT_WEIGHT + 1.0

    @property
    def idle_share(self) -> float:
        return self.idle / self.seen if self.seen else 0.0


class IdleMarks:
    """What the dumps saw of innermost Python frames: per (pid, tid, position), per (pid, position), and per
    position."""

    def __init__(self, memory: int = FRAME_ACTIVITY_MEMORY) -> None:
        self._memory = memory
        self.by_thread: OrderedDict[_ThreadPosition, Observed] = OrderedDict()
        self.by_process: OrderedDict[_ProcessPosition, Observed] = OrderedDict()
        self.anywhere: OrderedDict[Position, Observed] = OrderedDict()
        # Per (thread, position), the idle samples a split owed or gave beyond its share (under half a sample
        # either way): a window's few samples at a line are split in whole samples, and this carries the rounding
        # to the next window, so that over many small counts the idle ones come to the observed share.
        self._owed: OrderedDict[_ThreadPosition, float] = OrderedDict()
        self._sleep_lines: OrderedDict[Position, bool] = OrderedDict()  # per position: its line only sleeps

    def split(self, count: StackCount) -> tuple[StackCount, ...]:
        """``count`` as its idle samples and its busy ones (one count where all are one or the other), by the
        idle share at its innermost Python frame (see :meth:`idle_share`)."""
        frame = innermost_python(count.frames)
        share = self.idle_share(count.pid, count.tid, frame)
        if share <= 0.0 or share >= 1.0 or frame is None:
            idle = count.count if share >= 1.0 else 0
        else:
            key = (count.pid, count.tid, frame.function, frame.file, frame.line)
            owed = self._owed.get(key, 0.0) + count.count * share
            # Within 0..count (the carry is under half a sample either way); bounded against rounding all the same.
            idle = min(count.count, max(0, math.floor(owed + 0.5)))
            _keep(self._owed, key, owed - idle, self._memory)
        parts = ((True, idle), (False, count.count - idle))
        return tuple(count if (idle_part == count.idle and n == count.count) else StackCount(
            pid=count.pid, tid=count.tid, thread_name=count.thread_name, idle=idle_part, frames=count.frames, count=n,
        ) for idle_part, n in parts if n)

    def _sleeps(self, frame: StackFrame) -> bool:
        """The frame's line only sleeps (read once per position, from this machine's copy of its file)."""
        position = (frame.function, frame.file, frame.line)
        known = self._sleep_lines.get(position)
        if known is None:
            text = line_in(frame.file, frame.line, frame.function) if frame.line > 0 else None
            known = text is not None and _SLEEP_LINE.match(text) is not None
            _keep(self._sleep_lines, position, known, self._memory)
        return known

    def idle_share(self, pid: int, tid: int, frame: StackFrame | None) -> float:
        """The share of samples at ``frame`` (an innermost Python frame) that were idle: 1 at a known blocking
        call; else the recent-weighted share of the dumps that caught this thread there idle; where none did, the
        share of this process's threads there, else of any thread's, each only with MIN_BORROWED_WEIGHT of dumps
        behind it (see the module docstring); 0 where too few dumps have been (or no Python frame)."""
        if frame is None:
            return 0.0
        if any(frame_matches(frame, name, suffix) for name, suffix in KNOWN_WAITS) or self._sleeps(frame):
            return 1.0
        position = (frame.function, frame.file, frame.line)
        own = self.by_thread.get((pid, tid, *position))
        if own is not None:
            return own.idle_share
        for borrowed in (self.by_process.get((pid, *position)), self.anywhere.get(position)):
            if borrowed is not None and borrowed.seen >= MIN_BORROWED_WEIGHT:
                return borrowed.idle_share
        return 0.0

    def remember(self, threads: Sequence[ThreadStack]) -> None:
        """What one dump saw each thread doing, and where."""
        for thread in threads:
            frame = innermost_python(thread.frames)
            if frame is None:
                continue
            position = (frame.function, frame.file, frame.line)
            _observe(self.by_thread, (thread.pid, thread.tid, *position), thread.idle, self._memory)
            _observe(self.by_process, (thread.pid, *position), thread.idle, self._memory)
            _observe(self.anywhere, position, thread.idle, self._memory)


def _observe(memory: OrderedDict[_Key, Observed], key: _Key, idle: bool, limit: int) -> None:
    observed = memory.get(key) or Observed()
    observed.add(idle)
    _keep(memory, key, observed, limit)


def _keep(memory: OrderedDict[_Key, _Value], key: _Key, value: _Value, limit: int) -> None:
    memory[key] = value
    memory.move_to_end(key)
    while len(memory) > limit:
        memory.popitem(last=False)
