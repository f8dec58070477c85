"""Which samples of the record windows were idle: the dumps' activity flags, remembered by code position.

py-spy's raw output (the record windows) carries no idle flag; each dump gives every thread's current stack with
py-spy's ``active`` flag. :class:`IdleMarks` remembers, for each innermost Python frame a dump caught a thread in,
whether it was idle there (per thread, and for any thread), and marks each window's counts by it. It is bounded
(least recently seen first out) and not thread-safe: the stack sampler calls it under its lock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import TypeVar

from probes.frame import StackCount, StackFrame, ThreadStack
from probes.sampling.pyspy_output import KNOWN_WAITS
from probes.sampling.stacks import frame_matches

# How many (thread, innermost frame) -> idle observations to remember for marking counts.
FRAME_ACTIVITY_MEMORY = 4096

Position = tuple[str, str, int]  # function, file, line of an innermost Python frame
_Key = TypeVar("_Key", bound=Hashable)


def innermost_python(frames: Sequence[StackFrame]) -> StackFrame | None:
    return next((f for f in frames if not f.native), None)


class IdleMarks:
    """Idle flags the dumps gave to innermost Python frames: per (pid, tid, position), and per position."""

    def __init__(self, memory: int = FRAME_ACTIVITY_MEMORY) -> None:
        self._memory = memory
        self.by_thread: OrderedDict[tuple[int, int, str, str, int], bool] = OrderedDict()
        self.anywhere: OrderedDict[Position, bool] = OrderedDict()

    def mark(self, count: StackCount) -> StackCount:
        """``count`` with its ``idle`` judged (see :meth:`judge`)."""
        idle = self.judge(count.pid, count.tid, innermost_python(count.frames))
        return count if idle == count.idle else StackCount(
            pid=count.pid, tid=count.tid, thread_name=count.thread_name, idle=idle,
            frames=count.frames, count=count.count,
        )

    def judge(self, pid: int, tid: int, frame: StackFrame | None) -> bool:
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
        seen = self.by_thread.get((pid, tid, *position))
        if seen is None:
            seen = self.anywhere.get(position, False)
        return seen

    def remember(self, threads: Sequence[ThreadStack]) -> None:
        """What one dump saw each thread doing, and where."""
        for thread in threads:
            frame = innermost_python(thread.frames)
            if frame is None:
                continue
            position = (frame.function, frame.file, frame.line)
            # Busy wins: a thread caught running at a place is busy there, even if a later dump
            # (under CPU contention, between time slices) calls it inactive at the same line.
            _remember(self.by_thread, (thread.pid, thread.tid, *position), thread.idle, self._memory)
            _remember(self.anywhere, position, thread.idle, self._memory)


def _remember(memory: OrderedDict[_Key, bool], key: _Key, idle: bool, limit: int) -> None:
    memory[key] = idle and memory.get(key, True)
    memory.move_to_end(key)
    while len(memory) > limit:
        memory.popitem(last=False)
