"""Who held the main process's GIL, from py-spy's GIL windows (probes/sampling/pyspy.py): how often py-spy looked,
and each thread that held it with its commonest stack while it did, busiest first. Read by the GIL rule
(rules/gil_contention.py) and the snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from probes.frame import Frame, GilSamples, StackFrame

# GIL windows last 10 s (probes/sampling/process_sampler.py), so the look-back spans about three of them.
GIL_WINDOW_S = 30.0


@dataclass
class GilHolder:
    """One thread of the main process that held its GIL at some of py-spy's looks."""

    tid: int
    name: str | None
    held: int  # looks at which it held the GIL
    stack: tuple[StackFrame, ...]  # its commonest stack while it held it, innermost first


@dataclass
class GilSummary:
    """Who held the main process's GIL over the GIL look-back (GIL_WINDOW_S): py-spy looked ``looks``
    times; ``holders`` busiest first, the main thread among them when it held it."""

    looks: int
    holders: list[GilHolder]
    main_tid: int

    def main_held(self) -> int:
        return sum(h.held for h in self.holders if h.tid == self.main_tid)

    def busiest_other(self) -> GilHolder | None:
        return next((h for h in self.holders if h.tid != self.main_tid), None)


def gil_summary(frames: Sequence[Frame], main_pid: int) -> GilSummary | None:
    """The GIL windows of the main process over ``frames`` summed, or None when none finished there."""
    windows: list[GilSamples] = [g for f in frames for g in f.stacks.gil if g.pid == main_pid]
    if not windows:
        return None
    held: dict[int, int] = {}
    names: dict[int, str | None] = {}
    stacks: dict[int, dict[tuple[StackFrame, ...], int]] = {}
    for window in windows:
        for count in window.holders:
            held[count.tid] = held.get(count.tid, 0) + count.count
            names[count.tid] = count.thread_name or names.get(count.tid)
            per_stack = stacks.setdefault(count.tid, {})
            per_stack[count.frames] = per_stack.get(count.frames, 0) + count.count
    holders = [GilHolder(tid, names.get(tid), n, max(stacks[tid], key=stacks[tid].__getitem__))
               for tid, n in sorted(held.items(), key=lambda item: -item[1])]
    return GilSummary(looks=sum(w.samples for w in windows), holders=holders, main_tid=main_pid)
