"""Reading py-spy's output: ``record --format raw`` and ``dump --json`` text into probes.frame types.

Pure functions of text (no processes, no files, no clock), so py-spy's formats are tested here without
py-spy: the stack sampler (probes/sampling/pyspy.py) runs the binary and hands its output to these parsers (a
``record --gil`` window is the same raw format, holding the GIL holder's stacks only), asks
``other_thread_working`` of a dump whether a GIL window is worth running, and the sampling policy
(probes/sampling/sampling_policy.py) compares the ``dominant_position`` of successive windows, and a dump's
``main_thread_position`` with the ``main_thread_positions`` its windows saw.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from functools import partial

from probes.frame import StackCount, StackFrame, ThreadStack
from probes.lru import LruCache
from probes.sampling.stacks import frame_matches
from probes.stack_identity import is_main_thread

_THREAD_PART = re.compile(r"^thread \((?P<tid>0x[0-9A-Fa-f]+|\d+)\)(?:: (?P<name>.*))?$")
_PROCESS_PART = re.compile(r'^process \d+:"')
# The file may not contain parentheses, so a C++ name such as "std::function<void ()>" stays whole.
_FRAME_PART = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")
# Fallback for a path that contains parentheses: split at the first " (" (Python names have none).
_FRAME_PART_LOOSE = re.compile(r"^(?P<function>.*?) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")

_PYTHON_SOURCE_SUFFIXES = (".py", ".pyw", ".pyx")
TORCH_WORKER_LOOP = ("_worker_loop", "torch/utils/data/_utils/worker.py")
# Innermost Python frames that are blocking calls: py-spy's own fallback list (threading wait,
# selectors select) plus socket accept and Thread.join's lock wait.
KNOWN_WAITS = (
    ("wait", "threading.py"),
    ("_wait_for_tstate_lock", "threading.py"),
    ("select", "selectors.py"),
    ("accept", "socket.py"),
)


# Parsed stacks, shared: a training loop shows the same few hundred stacks window after window, and the
# History keeps 600 frames of them. Parsing each window afresh held 27,000 StackFrame objects and their
# strings (2.7 MB of an 18 MB heap) where a few hundred distinct ones do; one tuple per distinct stack serves
# every window and every dump that saw it, and one StackFrame per distinct frame serves every stack it is in.
# Both tables are bounded, least recently used first (probes/lru.py), so they fill in the first minutes and stay
# full; the History still holds what it needs of what they let go. Before, a stack's entry was keyed by its
# whole text and held its own StackFrames and strings (about 3 KB); a loop that keeps printing new line
# combinations (the main thread's line times the op's) filled two generations of 512 of them in 20 minutes, and
# dropping a generation at once let the heap rise and fall by 1.5 MB while resident memory crept up behind it
# (benchmarks/heap_soak.py). Keyed by its shared frames, a new stack costs one tuple.
_STACK_CACHE_SIZE = 512
_FRAME_CACHE_SIZE = 2048
_shared_stacks: LruCache[tuple[StackFrame, ...], tuple[StackFrame, ...]] = LruCache(_STACK_CACHE_SIZE)
_shared_frames: LruCache[object, StackFrame] = LruCache(_FRAME_CACHE_SIZE)


def _shared_stack(frames: tuple[StackFrame, ...]) -> tuple[StackFrame, ...]:
    """The one tuple equal to ``frames`` that every window and dump shares (``frames`` itself on first sight)."""
    return _shared_stacks.get_or_build(frames, lambda: frames)


def stack_cache_size() -> int:
    """How many parsed stacks are kept for sharing (at most _STACK_CACHE_SIZE)."""
    return len(_shared_stacks)


def frame_cache_size() -> int:
    """How many distinct frames are kept for sharing (at most _FRAME_CACHE_SIZE)."""
    return len(_shared_frames)


def _parse_stack(parts: list[str], native_sampling: bool) -> tuple[StackFrame, ...]:
    """The frames of one raw stack (its ';'-separated parts, outermost first), innermost first, shared with
    every earlier window that printed the same stack."""
    return _shared_stack(tuple(
        _shared_frames.get_or_build((part, native_sampling), partial(_parse_frame, part, native_sampling))
        for part in reversed(parts)))


def _dump_stack(frames: Sequence[dict]) -> tuple[StackFrame, ...]:
    """The frames of one thread of a ``py-spy dump --json``, innermost first as py-spy lists them, shared with
    every earlier dump and window that saw the same stack."""
    places = ((f.get("name", ""), f.get("filename", ""), int(f.get("line") or 0)) for f in frames)
    return _shared_stack(tuple(_shared_frames.get_or_build(place, partial(StackFrame, *place))
                               for place in places))


def _parse_frame(text: str, native_sampling: bool) -> StackFrame:
    match = _FRAME_PART.match(text) or _FRAME_PART_LOOSE.match(text)
    if match is None:  # a frame py-spy printed without a file
        return StackFrame(function=text, file="", line=0, native=native_sampling)
    file = match.group("file")
    line = int(match.group("line") or 0)
    native = native_sampling and not (file.endswith(_PYTHON_SOURCE_SUFFIXES) or file.startswith("<"))
    return StackFrame(function=match.group("function"), file=file, line=line, native=native)


def parse_raw(text: str, pid: int, native: bool = False) -> list[StackCount]:
    """Parse ``py-spy record --format raw --threads`` output into StackCounts (frames innermost first).

    Each line is ``thread (TID): NAME;outer (file:line);...;inner (file:line) COUNT``, frames joined by
    ';' outermost first. Frames without a line number print as ``name (file)``; with ``--subprocesses``
    lines start with ``process PID:"cmdline"`` parts, which are skipped. The thread id is the OS id,
    or the pthread id in hex when py-spy could not find the OS id. ``idle`` is left False: raw output
    has no idle flag (a record window's pair measures it: :func:`split_by_activity`).
    """
    counts: list[StackCount] = []
    for line in text.splitlines():
        stack, _, count_text = line.rstrip().rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        parts = stack.split(";")
        if parts and _PROCESS_PART.match(parts[0]):
            while parts and not parts[0].endswith('"'):  # a command line may itself contain ';'
                parts.pop(0)
            parts = parts[1:]
        tid, thread_name = 0, None
        thread_match = _THREAD_PART.match(parts[0]) if parts else None
        if thread_match:
            tid_text = thread_match.group("tid")
            tid = int(tid_text, 16) if tid_text.startswith("0x") else int(tid_text)
            thread_name = thread_match.group("name")
            parts = parts[1:]
            # A thread name containing ';' spills into the next parts; frames always end in ")".
            while thread_name is not None and parts and not parts[0].endswith(")"):
                thread_name += ";" + parts.pop(0)
        frames = _parse_stack(parts, native)
        counts.append(
            StackCount(pid=pid, tid=tid, thread_name=thread_name, idle=False, frames=frames,
                       count=int(count_text))
        )
    return counts


def split_by_activity(every: Sequence[StackCount], active: Sequence[StackCount]) -> list[StackCount]:
    """One record window's counts with each stack's samples split into working and waiting, from the pair of
    py-spy records that took it together (probes/sampling/pyspy_binary.RecordPair): ``every`` (``--idle``: every
    thread in every sample) and ``active`` (only the samples py-spy found the thread active in).

    Per stack, the working samples are its count in ``active``. Per thread, the waiting samples are its count in
    ``every`` less its count in ``active`` (at least 0): both halves take the same number of samples, so a thread
    that never waited has none, however its samples fell among its stacks in each half. They go to the stacks that
    ``every`` caught more often than ``active``, in proportion to that excess (a stack of the thread's
    waiting shows only in ``every``). Differencing each stack alone would make waiting of the random spread of a
    busy thread's samples over its lines (a pure-Python spin showed a few waiting samples a window).

    py-spy's "active" is the thread's OS state: running or runnable (R), except at a known blocking call
    (threading's wait, selectors' select), which it counts idle whatever the state. So a thread queued for a core
    on a busy machine, or waiting for the GIL, counts as working; who held the GIL comes from the GIL windows."""
    Key = tuple[int, tuple[StackFrame, ...]]
    working: dict[Key, int] = {}
    first_active: dict[Key, StackCount] = {}
    for count in active:
        key = (count.tid, count.frames)
        working[key] = working.get(key, 0) + count.count
        first_active.setdefault(key, count)
    every_by_stack: dict[Key, StackCount] = {}
    for count in every:
        key = (count.tid, count.frames)
        seen = every_by_stack.get(key)
        every_by_stack[key] = count if seen is None else replace(seen, count=seen.count + count.count)
    waiting_of_thread: dict[int, int] = {}
    for (tid, _), count in every_by_stack.items():
        waiting_of_thread[tid] = waiting_of_thread.get(tid, 0) + count.count
    for (tid, _), works in working.items():
        waiting_of_thread[tid] = waiting_of_thread.get(tid, 0) - works
    excess = {key: count.count - working.get(key, 0) for key, count in every_by_stack.items()
              if count.count > working.get(key, 0)}
    waiting = _shares(excess, {tid: max(0, n) for tid, n in waiting_of_thread.items()})
    counts: list[StackCount] = []
    for key, count in every_by_stack.items():
        if working.get(key):
            counts.append(replace(count, idle=False, count=working[key]))
        if waiting.get(key):
            counts.append(replace(count, idle=True, count=waiting[key]))
    for key, count in first_active.items():  # stacks only the active half caught (sampled at other moments)
        if key not in every_by_stack:
            counts.append(replace(count, idle=False, count=working[key]))
    return counts


def _shares(excess: dict[tuple[int, tuple[StackFrame, ...]], int], total: dict[int, int]
            ) -> dict[tuple[int, tuple[StackFrame, ...]], int]:
    """Each thread's ``total`` waiting samples over its stacks in proportion to their ``excess``, in whole samples
    (largest remainders first). A thread's total never exceeds its stacks' excess."""
    out: dict[tuple[int, tuple[StackFrame, ...]], int] = {}
    by_thread: dict[int, list[tuple[int, tuple[StackFrame, ...]]]] = {}
    for key in excess:
        by_thread.setdefault(key[0], []).append(key)
    for tid, keys in by_thread.items():
        want = min(total.get(tid, 0), sum(excess[k] for k in keys))
        if want <= 0:
            continue
        spread = sum(excess[k] for k in keys)
        exact = {k: want * excess[k] / spread for k in keys}
        for k in keys:
            out[k] = int(exact[k])
        left = want - sum(out[k] for k in keys)
        for k in sorted(keys, key=lambda k: exact[k] - out[k], reverse=True)[:left]:
            out[k] += 1
    return out


def idle_at_known_waits(counts: Sequence[StackCount]) -> list[StackCount]:
    """A window whose active half failed (its waiting not measured): the samples at a known blocking call
    (KNOWN_WAITS, py-spy's own fallback list and a little more) idle, the rest working."""
    return [replace(count, idle=True) if count.frames and any(
        frame_matches(count.frames[0], function, suffix) for function, suffix in KNOWN_WAITS) else count
        for count in counts]


def parse_dump(text: str, pid: int) -> list[ThreadStack]:
    """Parse ``py-spy dump --json`` output into ThreadStacks (idle = py-spy found the thread inactive)."""
    threads = []
    for trace in json.loads(text):
        tid = trace.get("os_thread_id") or trace.get("thread_id") or 0
        frames = _dump_stack(trace.get("frames", ()))
        threads.append(
            ThreadStack(
                pid=pid,
                tid=int(tid),
                name=trace.get("thread_name"),
                idle=not trace.get("active", True),
                owns_gil=bool(trace.get("owns_gil", False)),
                frames=frames,
            )
        )
    return threads


def samples_in(counts: Sequence[StackCount]) -> int:
    """Samples one raw window took: with --idle every thread is in every sample, so the thread seen
    most often (threads can start mid-window) was seen once per sample."""
    per_thread: dict[int, int] = {}
    for count in counts:
        per_thread[count.tid] = per_thread.get(count.tid, 0) + count.count
    return max(per_thread.values(), default=0)


def dominant_position(counts: Sequence[StackCount]) -> tuple[str, str] | None:
    """Where a window's busiest samples were: the innermost (function, file) with the most samples,
    leaving out the known blocking calls that every idle helper thread sits in."""
    totals: dict[tuple[str, str], int] = {}
    for count in counts:
        if not count.frames:
            continue
        inner = count.frames[0]
        if any(frame_matches(inner, function, suffix) for function, suffix in KNOWN_WAITS):
            continue
        key = (inner.function, inner.file)
        totals[key] = totals.get(key, 0) + count.count
    return max(totals, key=totals.__getitem__) if totals else None


def main_thread_positions(counts: Sequence[StackCount], pid: int) -> frozenset[tuple[str, str]]:
    """Every (function, file) on the stacks a window's samples caught ``pid``'s main thread in, innermost or
    not, waits included."""
    return frozenset((f.function, f.file) for c in counts
                     if c.frames and is_main_thread(c.pid, c.tid, c.thread_name, c.frames, pid) for f in c.frames)


def main_thread_position(threads: Sequence[ThreadStack], pid: int) -> tuple[str, str] | None:
    """The innermost (function, file) a dump caught ``pid``'s main thread at; None when it has no frames."""
    for thread in threads:
        if thread.frames and is_main_thread(thread.pid, thread.tid, thread.name, thread.frames, pid):
            return thread.frames[0].function, thread.frames[0].file
    return None


def is_worker_stack(frames: Sequence[StackFrame]) -> bool:
    function, file_suffix = TORCH_WORKER_LOOP
    return any(frame_matches(f, function, file_suffix) for f in frames)


def other_thread_working(pid: int, threads: Sequence[ThreadStack]) -> bool:
    """Whether a dump caught a thread other than the main one (TID == PID) working: active, and not in one of
    the known blocking calls. Only then can the threads of a process contend for its GIL."""
    for thread in threads:
        if thread.tid == pid or thread.idle or not thread.frames:
            continue
        inner = thread.frames[0]
        if not any(frame_matches(inner, function, suffix) for function, suffix in KNOWN_WAITS):
            return True
    return False
