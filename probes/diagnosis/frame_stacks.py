"""One frame's stack counts as the diagnosis reads them (FrameStacks): split by thread kind (the main thread, the
main process's other threads, DataLoader workers), with what the main thread compiled and what ran outside
compiling. Each frame is summarised once: summaries are memoised by the frame's identity (frames are immutable and
the History keeps them alive) and dropped with the frame.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from probes.diagnosis.stacks import COMPILE, classify_cached, runs_compiled_code
from probes.diagnosis.windows import MAX_LOOKBACK_FRAMES, STACK_WINDOW_S, recent
from probes.frame import ROLE_DATALOADER_WORKER, Frame, StackCount, StackFrame
from probes.stack_identity import is_main_thread

Stack = tuple[StackFrame, ...]  # innermost frame first


@dataclass(frozen=True)
class FrameStacks:
    """One frame's stack counts, split by thread kind, with the main thread's distinct stacks."""

    main_counts: tuple[StackCount, ...] = ()
    other_counts: tuple[StackCount, ...] = ()  # other threads of the main process
    worker_counts: tuple[StackCount, ...] = ()  # DataLoader workers' main threads
    main_stacks: frozenset[Stack] = frozenset()
    main_compile: int = 0
    # The call sites the main thread compiled from (compile_site), and every frame of its whole stacks outside
    # compiling (reaches_root): which code ran, compiled or not, so a site that compiles again after it ran is seen.
    compile_sites: frozenset[StackFrame] = frozenset()
    ran_frames: frozenset[StackFrame] = frozenset()
    main_ran: int = 0  # samples of those whole stacks outside compiling
    main_compiled_code: int = 0  # samples running torch.compile's compiled code (stacks.runs_compiled_code)
    main_samples: int = 0


# Summaries of the frames a diagnosis looks back over, so each tick summarises only its new frame. An entry
# lives only as long as its frame's stacks (a weakref finalizer drops it when they go), so the cache never
# keeps a frame's samples alive after the History has let the frame go: sized to hold stacks alive instead, it
# made gputop's memory grow for most of an hour (docs/benchmarks.md). The bound still caps it where far more
# frames are alive at once (a replay holds its whole recording).
CACHED_RANKS = 8
_FRAME_CACHE_LIMIT = CACHED_RANKS * (MAX_LOOKBACK_FRAMES + 16)
_frame_cache: OrderedDict[int, tuple[int, FrameStacks]] = OrderedDict()


def reserve_cached_ranks(ranks: int) -> None:
    """Let the cache hold `ranks` ranks' look-back windows, never fewer than CACHED_RANKS: a job merged across
    nodes (probes/monitoring/cluster.py) has many more ranks' frames alive at once than one node, and a cache
    smaller than them re-summarises every frame each tick (docs/cluster.md). Entries still go with their frames,
    so this bounds nothing the History does not already hold."""
    global _FRAME_CACHE_LIMIT
    _FRAME_CACHE_LIMIT = max(CACHED_RANKS, ranks) * (MAX_LOOKBACK_FRAMES + 16)


def frame_stacks(frame: Frame, main_pid: int) -> FrameStacks:
    """The frame's stack counts summarised for the main process `main_pid` (memoised)."""
    key = id(frame.stacks)  # unique while the stacks live, and the entry goes when they do
    cached = _frame_cache.get(key)
    if cached is not None and cached[0] == main_pid:
        return cached[1]
    workers = {p.pid for p in frame.processes if p.role == ROLE_DATALOADER_WORKER}
    main: list[StackCount] = []
    other: list[StackCount] = []
    worker: list[StackCount] = []
    for count in frame.stacks.counts:
        if is_main_thread(count.pid, count.tid, count.thread_name, count.frames, main_pid):
            main.append(count)
        elif count.pid == main_pid:
            other.append(count)
        elif count.pid in workers and is_main_thread(count.pid, count.tid, count.thread_name, count.frames,
                                                      count.pid):
            worker.append(count)  # a worker's own work; its feeder and watchdog threads only wait
    sites, ran, ran_samples = _compiled_and_ran(main)
    summary = FrameStacks(
        main_counts=tuple(main),
        other_counts=tuple(other),
        worker_counts=tuple(worker),
        main_stacks=frozenset(c.frames for c in main),
        main_compile=sum(c.count for c in main if classify_cached(c.frames, c.idle).activity == COMPILE),
        compile_sites=sites,
        ran_frames=ran,
        main_ran=ran_samples,
        main_compiled_code=sum(c.count for c in main if runs_compiled_code(c.frames)),
        main_samples=sum(c.count for c in main),
    )
    if cached is None:
        weakref.finalize(frame.stacks, _frame_cache.pop, key, None)
    while len(_frame_cache) >= _FRAME_CACHE_LIMIT:
        _frame_cache.popitem(last=False)  # the oldest frame: it has left the look-back window
    _frame_cache[key] = (main_pid, summary)
    return summary


def main_thread_counts(frame: Frame, main_pid: int) -> tuple[StackCount, ...]:
    """The main thread's stack counts in one frame (memoised with the rest of the frame's summary)."""
    return frame_stacks(frame, main_pid).main_counts


def frames_sampled_enough(history: Sequence[Frame], main_pid: int, min_samples: int, reach_s: float) -> list[Frame]:
    """The frames of the last STACK_WINDOW_S, and earlier ones too until the main thread's samples in them reach
    `min_samples`: back `reach_s` at most, and never past a phase-change mark (the frames up to it are another
    phase). Oldest first.

    A window of fixed length can hold none of a thread's samples: once the sampler has settled (1 Hz, the picture
    holding still) a process's record window of 10 samples took up to 18 s beside two busy processes, and the
    processes of a tree take turns, so a 10 s look-back held no finished window of a rank for seconds at a time
    (a steady data-starved DDP job read "provisional: only 1 sample" a third of the time)."""
    frames = recent(history, reach_s)
    if not frames:
        return []
    window_start = frames[-1].time - STACK_WINDOW_S
    taken = 0
    samples = 0
    for frame in reversed(frames):
        if frame.stacks.phase_change or (frame.time <= window_start and samples >= min_samples):
            break
        taken += 1
        samples += sum(count.count for count in main_thread_counts(frame, main_pid))
    return frames[len(frames) - taken:]


def reaches_root(frames: Sequence[StackFrame]) -> bool:
    """The stack runs down to the script: its outermost Python frame is the module's (or runpy's, under -m).

    py-spy's nonblocking reads now and then catch a stack while it changes and return only its innermost frames,
    or none (docs/diagnosis.md has how many in the first compile of GPT-2 XL). Such a sample says nothing of what
    the thread was doing; counted as training, it made the first compile a recompilation storm."""
    outermost = next((f for f in reversed(frames) if not f.native), None)
    return outermost is not None and outermost.function in ("<module>", "_run_module_as_main")


def compile_site(frames: Sequence[StackFrame], compile_frame: StackFrame | None) -> StackFrame | None:
    """Where a compile was called from: the innermost frame outside torch beneath the compile's entry (the user's
    `model(x)` or `loss.backward()` line, or a trainer's in transformers or lightning). None where the stack does
    not reach one (cut short by py-spy)."""
    python = [f for f in frames if not f.native]
    if compile_frame not in python:
        return None
    return next((f for f in python[python.index(compile_frame) + 1:] if "/torch/" not in f.file), None)


def _compiled_and_ran(main: Sequence[StackCount]) -> tuple[frozenset[StackFrame], frozenset[StackFrame], int]:
    """FrameStacks' compile_sites, ran_frames and main_ran of the main thread's counts in one frame."""
    sites: set[StackFrame] = set()
    ran: set[StackFrame] = set()
    ran_samples = 0
    for count in main:
        classified = classify_cached(count.frames, count.idle)
        if classified.activity == COMPILE:
            site = compile_site(count.frames, classified.responsible)
            if site is not None:
                sites.add(site)
        elif reaches_root(count.frames):
            ran.update(count.frames)
            ran_samples += count.count
    return frozenset(sites), frozenset(ran), ran_samples
