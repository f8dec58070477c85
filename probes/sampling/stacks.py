"""Pure aggregation of sampled stacks: hot frames, merged counts, call trees, the drill-down cut.

No I/O: these functions take the StackCounts of one or many frames (live or replayed) and are shared
by the snapshot, the diagnosis and the TUI. Stacks are innermost frame first, as in probes.frame.

Percentages are of all samples in the selection (after the pid/tid/idle filters), so a frame seen in
every sample of the selection is 100%. A frame that appears several times in one stack (recursion)
counts once towards that stack's ``total``.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from probes.frame import StackCount, StackFrame

FrameKey = tuple[str, str, int]  # (function, file, line); line is 0 when lines are merged


@dataclass(frozen=True)
class HotFrame:
    function: str
    file: str
    line: int  # 0 when aggregated by function (by_line=False)
    own_pct: float  # share of samples where this frame was the innermost one
    total_pct: float  # share of samples where it was anywhere on the stack
    own: int
    total: int


@dataclass
class CallNode:
    """One node of a root-first call tree. The root is synthetic: function "<root>", file ""."""

    function: str
    file: str
    line: int
    total: int = 0  # samples passing through this node
    own: int = 0  # samples ending at this node
    children: list[CallNode] = field(default_factory=list)

    @property
    def key(self) -> FrameKey:
        return (self.function, self.file, self.line)

    def child(self, key: FrameKey) -> CallNode | None:
        return next((c for c in self.children if c.key == key), None)


def frame_matches(frame: StackFrame, function: str, file_suffix: str | None = None) -> bool:
    """Whether ``frame`` is ``function`` (in a file ending with ``file_suffix``).

    Python 3.11+ reports qualnames ("Queue.get", "fetch.<locals>.<listcomp>"), older ones bare
    names: ``function`` matches the whole qualname or its trailing dotted parts ("get", "Queue.get").
    The file suffix matches at a path boundary: "worker.py" matches ".../_utils/worker.py", not
    ".../myworker.py".
    """
    name = frame.function
    if name != function and not name.endswith("." + function):
        return False
    if file_suffix is None:
        return True
    if frame.file == file_suffix:
        return True
    boundary = file_suffix if file_suffix.startswith("/") else "/" + file_suffix
    return frame.file.endswith(boundary)


class _Sampled(Protocol):
    """A sample of one thread: read-only here, so frozen records (StackCount) qualify."""

    @property
    def pid(self) -> int: ...

    @property
    def tid(self) -> int: ...

    @property
    def idle(self) -> bool: ...


SampledT = TypeVar("SampledT", bound=_Sampled)


def select_samples(items: Iterable[SampledT], pid: int | None = None, tid: int | None = None,
                   include_idle: bool = True) -> list[SampledT]:
    """The stack counts (or thread stacks) of one process and/or thread, idle ones left out on request."""
    return [
        c
        for c in items
        if (pid is None or c.pid == pid) and (tid is None or c.tid == tid) and (include_idle or not c.idle)
    ]


def _key(frame: StackFrame, by_line: bool) -> FrameKey:
    return (frame.function, frame.file, frame.line if by_line else 0)


def _pct(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 2) if whole else 0.0


def merge_counts(counts: Iterable[StackCount]) -> tuple[StackCount, ...]:
    """Identical stacks of the same thread (and idleness) summed into one StackCount each.

    A thread renamed between samples keeps its latest non-empty name. Sorted by count, largest first.
    """
    merged: dict[tuple, list] = {}
    for c in counts:
        key = (c.pid, c.tid, c.idle, c.frames)
        entry = merged.get(key)
        if entry is None:
            merged[key] = [c.thread_name, c.count]
        else:
            entry[0] = c.thread_name or entry[0]
            entry[1] += c.count
    result = [
        StackCount(pid=pid, tid=tid, thread_name=name, idle=idle, frames=frames, count=count)
        for (pid, tid, idle, frames), (name, count) in merged.items()
    ]
    result.sort(key=lambda c: (-c.count, c.pid, c.tid))
    return tuple(result)


def hot_frames(
    counts: Iterable[StackCount],
    *,
    pid: int | None = None,
    tid: int | None = None,
    include_idle: bool = True,
    by_line: bool = True,
    limit: int | None = None,
) -> list[HotFrame]:
    """Frames ranked by own samples (innermost), then total samples (anywhere on the stack)."""
    selected = select_samples(counts, pid, tid, include_idle)
    grand_total = sum(c.count for c in selected)
    own: Counter[FrameKey] = Counter()
    total: Counter[FrameKey] = Counter()
    for c in selected:
        if not c.frames:
            continue
        keys = [_key(f, by_line) for f in c.frames]
        own[keys[0]] += c.count
        for key in set(keys):
            total[key] += c.count
    ranked = sorted(total, key=lambda k: (-own[k], -total[k], k))
    if limit is not None:
        ranked = ranked[:limit]
    return [
        HotFrame(
            function=k[0],
            file=k[1],
            line=k[2],
            own_pct=_pct(own[k], grand_total),
            total_pct=_pct(total[k], grand_total),
            own=own[k],
            total=total[k],
        )
        for k in ranked
    ]


def call_tree(
    counts: Iterable[StackCount],
    *,
    pid: int | None = None,
    tid: int | None = None,
    include_idle: bool = True,
    by_line: bool = True,
) -> CallNode:
    """The selected stacks as a root-first tree; children sorted by total, largest first.

    The root's total is every selected sample; its own is the samples with an empty stack.
    """
    root = CallNode(function="<root>", file="", line=0)
    for c in select_samples(counts, pid, tid, include_idle):
        root.total += c.count
        node = root
        for frame in reversed(c.frames):
            key = _key(frame, by_line)
            child = node.child(key)
            if child is None:
                child = CallNode(function=key[0], file=key[1], line=key[2])
                node.children.append(child)
            child.total += c.count
            node = child
        node.own += c.count
    _sort_tree(root)
    return root


def _sort_tree(node: CallNode) -> None:
    pending = [node]
    while pending:  # iterative: deep recursion in the target must not recurse here
        current = pending.pop()
        current.children.sort(key=lambda n: (-n.total, n.key))
        pending.extend(current.children)


def drill_counts(counts: Sequence[StackCount], key: FrameKey,
                 by_line: bool) -> tuple[list[StackCount], list[StackCount]]:
    """Stacks cut at the chosen frame, so :func:`call_tree` builds its caller and callee trees.

    Callers: the chosen frame and everything outside it, flipped so the chosen frame is the root.
    Callees: the chosen frame and everything inside it. A recursive frame is cut at its outermost call.
    `key`'s line is 0 when frames are grouped by function (by_line False).
    """
    callers, callees = [], []
    for count in counts:
        positions = [i for i, f in enumerate(count.frames) if _key(f, by_line) == key]
        if not positions:
            continue
        outermost = positions[-1]  # stacks are innermost first
        callees.append(dataclasses.replace(count, frames=count.frames[: outermost + 1]))
        callers.append(dataclasses.replace(count, frames=tuple(reversed(count.frames[outermost:]))))
    return callers, callees
