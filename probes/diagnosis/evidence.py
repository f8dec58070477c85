"""The facts the diagnosis rules read, gathered once per call from a recent window of frames: stack
profiles (main thread, other threads, DataLoader workers), CPU, cgroup throttling, GPU readings, signs
of progress and how long they have been absent, and children that died.

Pure: frames in, an Evidence out. Per-frame stack summaries are memoised by the frame's identity
(frames are immutable and the history keeps them alive), so each frame is classified once.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from probes.diagnosis.stacks import (
    COMPILE,
    IO,
    PEER_WAIT_BACKWARD,
    PEER_WAIT_BACKWARD_QUIET,
    PEER_WAIT_SYNC,
    ThreadProfile,
    classify_cached,
    is_main_thread,
    runs_compiled_code,
)
from probes.frame import (
    ROLE_COMPILE_WORKER,
    ROLE_DATALOADER_WORKER,
    ROLE_MAIN,
    Frame,
    GilSamples,
    GpuDevice,
    Liveness,
    ProcessSample,
    ProgressReading,
    StackCount,
    StackFrame,
    ThreadStack,
)
from probes.jobs.environment import is_python_command
from probes.monitoring.history import recent_frames
from probes.sampling.pyspy_output import is_worker_stack

STACK_WINDOW_S = 10.0  # stack counts arrive in windows of up to 5 s: look at two of them
METRIC_WINDOW_S = 5.0  # CPU, cgroup and GPU counters: recent enough to follow a phase change
# Main-thread samples after a phase-change mark that let the stack window start at the mark: diagnose's
# THIN_SAMPLES, the fewest a verdict is reached on.
PHASE_CHANGE_SAMPLES = 10
COMPILE_HISTORY_S = 60.0  # how far back recompilations are looked for
# How far back the start of torch.compile's warm-up is looked for: the first compile of a large model takes minutes
# (GPT-2 XL's on an H200 ran from ~10 s to ~140 s after start), and the History holds ten. MAX_LOOKBACK_FRAMES still
# bounds the walk.
WARMUP_HISTORY_S = 600.0
# A compile that starts after this long without compiling begins a new account (a new shape late in the run): the
# warm-up's graphs come one after another, with at most an evaluation between them.
WARMUP_PAUSE_S = 60.0
UNCHANGED_LOOKBACK_S = 60.0  # how far back a still main-thread stack is followed
MAX_LOOKBACK_FRAMES = 300  # bounds every walk over the history, whatever its length
CPU_PROGRESS_PCT = 2.0  # processes' CPU below this (percent of one core, 10 ms tick) is "no CPU time"
# The main thread's CPU (schedstat, nanoseconds) above this is progress: 2 ms a second. A thread blocked
# in a lock or a read uses none; one waking each few seconds from a timed wait uses microseconds.
MAIN_THREAD_CPU_PROGRESS_PCT = 0.2
GPU_PROGRESS_UTIL_PCT = 5.0
# A main thread that py-spy calls idle while its GPU runs kernels at least this share of the tick is waiting for
# the GPU (a CUDA synchronisation: `.item()`, backward's tail, the optimizer), not idle. A sync blocks only while
# a kernel runs, so the GPU is busy at least as long as the thread waits on it: a GPU-bound step keeps util near
# 100% (the H200 runs of tests/fixtures/h200: 100%). Below half, more of the tick had no kernel running than had
# one, so most of a long wait cannot have been on the GPU. Half is also where the data rule calls a GPU starved
# (rules/data_bound.py GPU_STARVED_UTIL_PCT): a GPU is either starved or busy enough to be waited on, never both.
GPU_WAIT_UTIL_PCT = 50.0
COMPILE_FRAME_SHARE = 0.1  # a sample window "compiled" if this share of its main-thread samples did
# A GPU "spins" at this util with fewer SMs active (or less power) than this: kernels waiting, not working.
SPIN_UTIL_PCT = 70.0
SPIN_SM_ACTIVE_PCT = 35.0
SPIN_POWER_FRACTION = 0.35
# Who held the GIL: GIL windows last 10 s (probes/sampling/pyspy.py), so look back over about three of them.
GIL_WINDOW_S = 30.0
# A rank's main thread on a CPU or queued for one less than this share of wall time barely works: its
# backward samples are waits for the other ranks, whatever py-spy's idle flag caught.
QUIET_MAIN_THREAD_PCT = 30.0


@dataclass(frozen=True)
class _FrameStacks:
    """One frame's stack counts, split by thread kind, with the main thread's distinct stacks."""

    main_counts: tuple = ()
    other_counts: tuple = ()  # other threads of the main process
    worker_counts: tuple = ()  # DataLoader workers' main threads
    main_stacks: frozenset = frozenset()
    main_compile: int = 0
    # The call sites the main thread compiled from (compile_site), and every frame of its whole stacks outside
    # compiling (reaches_root): which code ran, compiled or not, so a site that compiles again after it ran is seen.
    compile_sites: frozenset = frozenset()
    ran_frames: frozenset = frozenset()
    main_ran: int = 0  # samples of those whole stacks outside compiling
    main_compiled_code: int = 0  # samples running torch.compile's compiled code (stacks.runs_compiled_code)
    main_samples: int = 0


# Summaries of the frames a diagnosis looks back over, so each tick summarises only its new frame. An entry
# lives only as long as its frame's stacks (a weakref finalizer drops it when they go), so the cache never
# keeps a frame's samples alive after the History has let the frame go; sized to hold stacks alive instead, it
# held 2528 frames' worth where a lone process needs 316, and gputop's memory grew for 40 minutes. The bound
# still caps it where far more frames are alive at once (a replay holds its whole recording).
CACHED_RANKS = 8
_FRAME_CACHE_LIMIT = CACHED_RANKS * (MAX_LOOKBACK_FRAMES + 16)
_frame_cache: OrderedDict[int, tuple[int, _FrameStacks]] = OrderedDict()


def reserve_cached_ranks(ranks: int) -> None:
    """Let the cache hold `ranks` ranks' look-back windows, never fewer than CACHED_RANKS: a job merged across
    nodes (probes/monitoring/cluster.py) has many more ranks' frames alive at once than one node, and a cache smaller
    than
    them re-summarises every frame each tick (64 nodes of 2 ranks: 0.87 core instead of 0.16). Entries still go
    with their frames, so this bounds nothing the History does not already hold."""
    global _FRAME_CACHE_LIMIT
    _FRAME_CACHE_LIMIT = max(CACHED_RANKS, ranks) * (MAX_LOOKBACK_FRAMES + 16)


def _frame_stacks(frame: Frame, main_pid: int) -> _FrameStacks:
    key = id(frame.stacks)  # unique while the stacks live, and the entry goes when they do
    cached = _frame_cache.get(key)
    if cached is not None and cached[0] == main_pid:
        return cached[1]
    workers = {p.pid for p in frame.processes if p.role == ROLE_DATALOADER_WORKER}
    main, other, worker = [], [], []
    for count in frame.stacks.counts:
        if is_main_thread(count.pid, count.tid, count.thread_name, count.frames, main_pid):
            main.append(count)
        elif count.pid == main_pid:
            other.append(count)
        elif count.pid in workers and is_main_thread(count.pid, count.tid, count.thread_name, count.frames,
                                                      count.pid):
            worker.append(count)  # a worker's own work; its feeder and watchdog threads only wait
    summary = _FrameStacks(
        main_counts=tuple(main),
        other_counts=tuple(other),
        worker_counts=tuple(worker),
        main_stacks=frozenset(c.frames for c in main),
        main_compile=sum(c.count for c in main if classify_cached(c.frames, c.idle).activity == COMPILE),
        **_compiled_and_ran(main),
        main_compiled_code=sum(c.count for c in main if runs_compiled_code(c.frames)),
        main_samples=sum(c.count for c in main),
    )
    if cached is None:
        weakref.finalize(frame.stacks, _frame_cache.pop, key, None)
    while len(_frame_cache) >= _FRAME_CACHE_LIMIT:
        _frame_cache.popitem(last=False)  # the oldest frame: it has left the look-back window
    _frame_cache[key] = (main_pid, summary)
    return summary


@dataclass
class GpuSummary:
    """The target's GPUs over the metric window (means), or why there are none."""

    devices: list[GpuDevice] = field(default_factory=list)  # latest reading of each in-target device
    available: bool = False
    reason: str | None = None
    util_pct: float | None = None
    sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_active_pct: float | None = None
    tensor_active_pct: float | None = None
    reasons: tuple[str, ...] = ()
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    assumed: bool = False  # NVML could not attribute processes; busy GPUs taken to be the target's

    @property
    def in_use(self) -> bool:
        return bool(self.devices)

    def spinning(self) -> bool:
        """Util high but few SMs at work (or, without GPM, little power): kernels that wait, as NCCL's do
        for a peer, rather than compute."""
        if not self.in_use or self.util_pct is None or self.util_pct < SPIN_UTIL_PCT:
            return False
        if self.sm_active_pct is not None:
            return self.sm_active_pct < SPIN_SM_ACTIVE_PCT
        return self.power_w is not None and bool(self.power_limit_w) and \
            self.power_w / self.power_limit_w < SPIN_POWER_FRACTION

    def label(self) -> str:
        if len(self.devices) == 1:
            return f"GPU {self.devices[0].index}"
        return f"{len(self.devices)} GPUs (mean)"


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


@dataclass
class DeadChild:
    """A child process of the target seen lately that is gone now, or a zombie."""

    pid: int
    name: str
    role: str
    how: str  # "exited" or "zombie"


@dataclass
class Evidence:
    """What the rules read. Profiles cover the stack window, CPU and GPU figures the metric window."""

    latest: Frame
    main_pid: int
    stack_frames: list[Frame]
    metric_frames: list[Frame]
    main: ThreadProfile
    others: ThreadProfile
    workers: ThreadProfile
    worker_cpu: dict[int, float]
    main_cpu_pct: float | None
    tree_cpu_pct: float | None
    effective_cpus: float | None
    throttled_fraction: float | None
    gpu: GpuSummary
    liveness: Liveness
    stuck_for_s: float  # since the last sign of progress, or since watching began if none was seen
    progress_seen: bool
    stuck_stack: tuple[StackFrame, ...] | None  # the main thread's stack while nothing moved
    stuck_thread: str | None
    unchanged_for_s: float  # how long the main thread's sampled stack has stayed one stack
    dead_children: list[DeadChild]
    # The main thread's compiling over the compile look-backs: warm-up or storm, since when, until when. Judged on
    # COMPILE_HISTORY_S, not the last window only: a storm comes and goes between windows, and its verdict should not.
    compile: CompileHistory
    compile_cpu_pct: float | None  # inductor compile workers' CPU
    disk_wait_threads: int
    read_chars_per_s: float | None  # read() bytes across the tree (files, pipes; not sockets)
    main_write_per_s: float | None
    active_tick_share: float | None  # share of ticks with CPU time, for loops that sleep
    allowed_cpus: int | None = None  # CPUs the target may run on (affinity)
    others_busy_cpus: float | None = None  # CPUs' worth those CPUs spent on other processes (metric window)
    job_cpus: float | None = None  # what the target's tree got meanwhile, in CPUs
    steal_pct: float | None = None
    main_thread_cpu_pct: float | None = None  # the main thread alone, metric window (schedstat)
    main_thread_runqueue_pct: float | None = None  # of wall time, runnable but not running
    # The main process is a rank: how it waits for the other ranks beyond collective frames (PEER_WAIT_*).
    peer_wait: str | None = None
    ranks_on_node: int = 1  # the job's live ranks on this node, sharing its CPUs (1 for a lone process)
    gil: GilSummary | None = None  # who held the main process's GIL (only where another thread worked)
    # The main thread's samples over the compile look-back (COMPILE_HISTORY_S) that ran torch.compile's compiled
    # code: above 0, the stacks show the model compiled, and no advice tells it to compile.
    compiled_code_share: float = 0.0

    def asleep_pct(self) -> float | None:
        """Percent of wall time the main thread neither ran nor waited for a CPU: it slept or blocked (None
        without schedstat). py-spy calls a thread active once it is runnable, and a sleeper woken on a crowded
        machine queues for a core with its stack still on the sleep: on such a machine this is the truer
        measure of how much it waits."""
        cpu, waiting = self.main_thread_cpu_pct, self.main_thread_runqueue_pct
        if cpu is None or waiting is None:
            return None
        return max(0.0, 100.0 - cpu - waiting)

    def running_share(self) -> float | None:
        """Of the time the main thread wanted a CPU, the share it had one (None without schedstat). py-spy
        counts a runnable thread as active, so on a crowded machine "computing" samples include waiting for
        a core: this share converts them back."""
        cpu, waiting = self.main_thread_cpu_pct, self.main_thread_runqueue_pct
        if cpu is None or waiting is None or cpu + waiting <= 0:
            return None
        return cpu / (cpu + waiting)


def _recent(history: Sequence[Frame], seconds: float) -> list[Frame]:
    """Frames within `seconds` of the latest, oldest first, at most MAX_LOOKBACK_FRAMES of them."""
    return recent_frames(history, seconds, MAX_LOOKBACK_FRAMES)


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _main_pid(frame: Frame) -> int:
    return next((p.pid for p in frame.processes if p.role == ROLE_MAIN), frame.target.pid)


def _alive(frame: Frame):
    return [p for p in frame.processes if p.alive and p.state != "zombie"]


def _tree_cpu(frame: Frame) -> float | None:
    values = [p.cpu_pct for p in _alive(frame) if p.cpu_pct is not None]
    return sum(values) if values else None


def _io_chars(frame: Frame) -> float | None:
    values = [(p.read_chars_per_s or 0.0) + (p.write_chars_per_s or 0.0)
              for p in _alive(frame) if p.read_chars_per_s is not None or p.write_chars_per_s is not None]
    return sum(values) if values else None


def _target_devices(frame: Frame) -> list[GpuDevice]:
    """The GPUs the target uses; see _unattributed for when NVML cannot say."""
    if not frame.gpu.available:
        return []
    mine = [d for d in frame.gpu.devices if d.in_target]
    if mine or not _unattributed(frame):
        return mine
    return [d for d in frame.gpu.devices if d.processes or (d.util_gpu_pct or 0.0) > 0.0]


def _unattributed(frame: Frame) -> bool:
    """NVML names no process that maps to a PID here: inside a container it reports the host's PIDs,
    which this PID namespace cannot see. Busy GPUs are then taken to be the target's (and said so)."""
    devices = frame.gpu.devices
    return bool(devices) and not any(d.in_target for d in devices) and not any(
        p.local_pid is not None or p.in_target for d in devices for p in d.processes)


def _latest_main_dump(frame: Frame, main_pid: int) -> ThreadStack | None:
    """The main thread in the latest py-spy dump (each thread's current stack, with py-spy's idle flag)."""
    return next((t for t in frame.stacks.threads
                 if is_main_thread(t.pid, t.tid, t.name, t.frames, main_pid)), None)


def _producers(frame: Frame, main_pid: int):
    """The tree's other live processes (DataLoader workers, helpers): work the main thread may wait on."""
    return [p for p in _alive(frame) if p.pid != main_pid]


def _progress_signals(frame: Frame, older: Frame | None, stacks: _FrameStacks,
                      newer_stacks: frozenset | None, main_pid: int, blocked_reading: bool) -> list[str]:
    """The kinds of progress one frame shows (empty: none).

    What counts is the main thread's own activity (its CPU time in nanoseconds, its reads and writes)
    and the other processes' (producers it may wait on): other threads of the main process do not count,
    so a heartbeat or logging thread that keeps running cannot hide a hung main thread. Frames recorded
    before per-thread counters existed fall back to the whole tree's CPU% and I/O.
    """
    signals = []
    main = frame.process(main_pid)
    thread_cpu = main.main_thread_cpu_pct if main is not None else None
    producers = _producers(frame, main_pid)
    producers_cpu = sum(p.cpu_pct or 0.0 for p in producers)
    if thread_cpu is None:
        cpu = _tree_cpu(frame)
        if cpu is not None and cpu >= CPU_PROGRESS_PCT:
            signals.append("cpu")
    elif thread_cpu >= MAIN_THREAD_CPU_PROGRESS_PCT:
        signals.append("cpu")
    elif producers_cpu >= CPU_PROGRESS_PCT:
        signals.append("producers")
    if blocked_reading and main is not None and _data_arrived(main):
        signals.append("reads")
    io = _main_thread_io(main) if main is not None and main.main_thread_read_chars_per_s is not None \
        else _io_chars(frame)
    if io:
        signals.append("io")
    elif any((p.read_chars_per_s or 0.0) + (p.write_chars_per_s or 0.0) > 0 for p in producers):
        signals.append("io")
    if len(stacks.main_stacks) > 1 or (stacks.main_stacks and newer_stacks and stacks.main_stacks != newer_stacks):
        signals.append("stack")
    if any((d.util_gpu_pct or 0.0) >= GPU_PROGRESS_UTIL_PCT for d in _target_devices(frame)):
        signals.append("gpu")
    if older is not None and _log_advanced(frame.progress, older.progress):
        signals.append("log")
    return signals


def _main_thread_io(main) -> float:
    return (main.main_thread_read_chars_per_s or 0.0) + (main.main_thread_write_chars_per_s or 0.0)


def _data_arrived(main) -> bool:
    """While the main thread sits in a read: did data reach it this tick?

    A slow stream costs almost no CPU and socket reads are not in /proc/PID/io, so this asks the kernel's
    TCP counters (bytes received) and the thread's wake-ups together: bytes arriving on some other
    connection do not wake a thread blocked on a silent peer. Without TCP counters (not a TCP stream, or
    no sock_diag), a wake-up of the blocked thread, or any CPU tick on older frames, stands in.
    """
    wakeups, received = main.main_thread_wakeups_per_s, main.tcp_received_per_s
    if wakeups is None:  # recorded before per-thread counters existed
        return (received or 0.0) > 0 or (main.cpu_pct or 0.0) > 0.0
    return wakeups > 0 and (received is None or received > 0)


def _log_advanced(now: ProgressReading | None, before: ProgressReading | None) -> bool:
    if now is None or before is None:
        return False
    if now.iteration is not None and before.iteration is not None and now.iteration != before.iteration:
        return True
    return now.last_update is not None and before.last_update is not None and now.last_update > before.last_update


def _liveness(history: Sequence[Frame], main_pid: int, hang_after_s: float,
              blocked_reading: bool) -> tuple[Liveness, float, bool]:
    """(state, seconds since the last progress, whether any progress was seen).

    Walks back from the latest frame until it finds progress (bounded). Hung needs measured silence
    (CPU readings present) for at least `hang_after_s`; before anything is measured it is unknown.
    """
    newest = len(history) - 1
    oldest = max(0, newest - MAX_LOOKBACK_FRAMES)
    latest_time = history[newest].time
    newer_stacks: frozenset | None = None
    measured = False
    last_progress: float | None = None
    for index in range(newest, oldest - 1, -1):
        frame = history[index]
        older = history[index - 1] if index > 0 else None
        stacks = _frame_stacks(frame, main_pid)
        signals = _progress_signals(frame, older, stacks, newer_stacks, main_pid, blocked_reading)
        if stacks.main_stacks:
            newer_stacks = stacks.main_stacks
        if _tree_cpu(frame) is not None:
            measured = True
        if signals:
            last_progress = frame.time
            break
    observed_from = history[oldest].time - history[oldest].interval_s
    if last_progress is not None:
        stuck_for = latest_time - last_progress
        if stuck_for < hang_after_s:
            return "progressing", stuck_for, True
    else:
        stuck_for = latest_time - observed_from
    if measured and stuck_for >= hang_after_s:
        return "hung", stuck_for, last_progress is not None
    return ("progressing" if last_progress is not None else "unknown"), stuck_for, last_progress is not None


def _latest_main_stack(frames: list[Frame], main_pid: int) -> tuple[StackFrame, ...] | None:
    """The main thread's commonest stack in the latest sample window."""
    for frame in reversed(frames):
        counts = _frame_stacks(frame, main_pid).main_counts
        if counts:
            return max(counts, key=lambda c: c.count).frames
    return None


def _unchanged_for(frames: list[Frame], main_pid: int) -> tuple[float, tuple[StackFrame, ...] | None]:
    """How long (seconds) the main thread's sampled stack has been one and the same, and that stack."""
    stack: tuple[StackFrame, ...] | None = None
    start: float | None = None
    for frame in reversed(frames):
        stacks = _frame_stacks(frame, main_pid)
        if not stacks.main_stacks:
            continue
        if len(stacks.main_stacks) > 1:
            break
        (only,) = stacks.main_stacks
        if stack is None:
            stack = only
        elif only != stack:
            break
        start = frame.time - frame.interval_s
    if stack is None or start is None:
        return 0.0, None
    return frames[-1].time - start, stack


def _dead_children(frames: list[Frame], main_pid: int) -> list[DeadChild]:
    """Children seen in the window that are gone (or zombies) now."""
    latest = frames[-1]
    now = {p.pid: p for p in latest.processes}
    dead: dict[int, DeadChild] = {}
    for p in latest.processes:
        if p.pid != main_pid and (p.state == "zombie" or not p.alive):
            dead[p.pid] = DeadChild(p.pid, p.name, p.role, "zombie" if p.state == "zombie" else "exited")
    for frame in frames[:-1]:
        for p in frame.processes:
            if p.pid != main_pid and p.pid not in now and p.pid not in dead:
                dead[p.pid] = DeadChild(p.pid, p.name, p.role, "exited")
    return list(dead.values())


def reaches_root(frames: Sequence[StackFrame]) -> bool:
    """The stack runs down to the script: its outermost Python frame is the module's (or runpy's, under -m).

    py-spy's nonblocking reads now and then catch a stack while it changes and return only its innermost frames,
    or none: in the first compile of GPT-2 XL (tests/fixtures/h200/gpt2xl_s1) 21 of 150 main-thread samples were a
    leaf of inductor, sympy or triton, or empty, outside every compile file. Such a sample says nothing of what the
    thread was doing; counted as training, it made the first compile a recompilation storm."""
    outermost = next((f for f in reversed(frames) if not f.native), None)
    return outermost is not None and outermost.function in ("<module>", "_run_module_as_main")


def compile_site(frames: Sequence[StackFrame], compile_frame: StackFrame | None) -> StackFrame | None:
    """Where a compile was called from: the innermost frame outside torch beneath the compile's entry (the user's
    `model(x)` or `loss.backward()` line, or a trainer's in transformers or lightning). None where the stack does
    not reach one (cut short by py-spy)."""
    frames = [f for f in frames if not f.native]
    if compile_frame not in frames:
        return None
    return next((f for f in frames[frames.index(compile_frame) + 1:] if "/torch/" not in f.file), None)


def _compiled_and_ran(main: Sequence[StackCount]) -> dict:
    """_FrameStacks' compile_sites, ran_frames and main_ran of the main thread's counts in one frame."""
    sites, ran, ran_samples = set(), set(), 0
    for count in main:
        classified = classify_cached(count.frames, count.idle)
        if classified.activity == COMPILE:
            site = compile_site(count.frames, classified.responsible)
            if site is not None:
                sites.add(site)
        elif reaches_root(count.frames):
            ran.update(count.frames)
            ran_samples += count.count
    return {"compile_sites": frozenset(sites), "ran_frames": frozenset(ran), "main_ran": ran_samples}


@dataclass(frozen=True)
class CompileHistory:
    """The main thread's compiling as the frames show it, to tell torch.compile's one-time warm-up from a
    recompilation storm.

    A warm-up compiles each graph once, on its first call: the first compile, then a second graph (train after
    eval, backward after forward), each from its own call site, with training between them at most. A storm is
    the same call compiling again after the job ran on (a new shape each time), again and again. So "the job ran"
    is measured on whole stacks outside compiling (reaches_root), and a recompile is counted where a call site
    (compile_site) compiles after the job ran on since that site last compiled (see compile_history): not where a
    window merely held a sample outside compile frames, nor once a window while one compile goes on. At the settled
    py-spy rate a window holds 1-5 samples, and one leaf-only or empty stack among them made the 48-layer first
    compile of tests/fixtures/h200/gpt2xl_s1 "a storm in 12 of 14 windows". The job's log would say when steps
    complete, but during a warm-up it has printed none yet (that run's log had no step line), its steps may be
    logged only every few dozen, and many jobs have no log gputop can read: the stacks are there whenever a verdict
    is."""

    windows: int = 0  # sample windows over COMPILE_HISTORY_S in which the main thread compiled
    # Over COMPILE_HISTORY_S, the windows in which a call site compiled again after the job had run on.
    recompiles: int = 0
    share: float = 0.0  # of the main thread's samples over COMPILE_HISTORY_S, compiling
    # Over the whole walk (WARMUP_HISTORY_S): when the compiling began (the start of its first window, or of the
    # first after WARMUP_PAUSE_S without compiling), or None where the main thread was never seen compiling;
    # whether it was already under way in the first window gputop saw (so it began earlier), or in the first window
    # of a walk that does not reach back to attach (so it began before the walk, which then says nothing of how long
    # it took); whether whole stacks outside compiling were seen since it began (the compiled code or the job's
    # other work ran); recompiles since it began; and when the main thread began running outside compiling after
    # its last compile (None while it compiles, or before anything outside compiling showed).
    began: float | None = None
    under_way_at_attach: bool = False
    began_before_look_back: bool = False
    ran_since_began: bool = False
    recompiles_seen: int = 0
    ended: float | None = None


def _window_start(frame: Frame, main_pid: int) -> float:
    """When the samples of this frame's main process began: its record windows' start, else the tick's."""
    starts = [w.started for w in frame.stacks.windows if w.pid == main_pid]
    return min(starts) if starts else frame.time - frame.interval_s


def compile_history(history: Sequence[Frame], main_pid: int) -> CompileHistory:
    """The CompileHistory of `history` (oldest first): one walk over the last WARMUP_HISTORY_S."""
    frames = _recent(history, WARMUP_HISTORY_S)
    storm_cutoff = frames[-1].time - COMPILE_HISTORY_S
    ran: set[StackFrame] = set()  # frames seen running outside compiling since their site last compiled
    # Sites that compiled, with whether their last window with compiling also ran outside compiling; and those after
    # whose last compile a whole window ran without compiling.
    compiled: dict[StackFrame, bool] = {}
    returned: set[StackFrame] = set()
    windows = recompiles = recompiles_seen = compiling = samples = 0
    began = ended = None
    under_way_at_attach = began_before_look_back = ran_since_began = seen_before = False
    for frame in frames:
        stacks = _frame_stacks(frame, main_pid)
        if not stacks.main_samples:
            continue  # no window landed this tick: neither compiling nor running
        recent = frame.time >= storm_cutoff
        if recent:
            compiling += stacks.main_compile
            samples += stacks.main_samples
        mixed = stacks.main_ran > 0
        if stacks.main_compile / stacks.main_samples >= COMPILE_FRAME_SHARE:
            if ended is not None and _window_start(frame, main_pid) - ended >= WARMUP_PAUSE_S:
                began = None  # compiling again after a long stretch of running: counted from here
                ran_since_began, recompiles_seen = False, 0
            if began is None:
                # Compiling in the first window of the whole History: it began before gputop attached; in the
                # first of a walk cut short by its bounds: before the walk.
                under_way_at_attach = not seen_before and len(frames) == len(history)
                began_before_look_back = not seen_before and len(frames) < len(history)
                began = frames[0].time - frames[0].interval_s if not seen_before else _window_start(frame, main_pid)
            # Again: the site's own line ran since it last compiled, or a whole window ran without compiling since,
            # or it went from compiling to running and back twice (its last window with compiling ran too, and so
            # does this one: a storm of quick compiles shows in every window). Not merely running beside a site's
            # first compile: the first step's forward runs beside its backward's first compile.
            again = any(site in ran or site in returned or (compiled.get(site) and mixed)
                        for site in stacks.compile_sites)
            ran -= stacks.compile_sites  # a long compile is one recompile, not one a window
            returned -= stacks.compile_sites
            compiled.update(dict.fromkeys(stacks.compile_sites, mixed))
            recompiles_seen += again
            if recent:
                windows += 1
                recompiles += again
            ended = None
        elif mixed:
            returned.update(compiled)
            compiled.clear()
            if began is not None and ended is None:
                ended = _window_start(frame, main_pid)
        if began is not None and mixed:
            ran_since_began = True
        # Running in the same window as compiling counts for the next window only: within a window the order is
        # unknown, and the first call of a graph both compiles and runs it.
        ran |= stacks.ran_frames
        seen_before = True
    return CompileHistory(windows=windows, recompiles=recompiles, share=compiling / samples if samples else 0.0,
                          began=began, under_way_at_attach=under_way_at_attach,
                          began_before_look_back=began_before_look_back, ran_since_began=ran_since_began,
                          recompiles_seen=recompiles_seen, ended=ended)


def _compiled_code_share(history: Sequence[Frame], main_pid: int) -> float:
    """The share of the main thread's samples over the compile look-back that ran torch.compile's compiled code.
    As long a look-back as the compile windows': a GPU-bound main thread shows in a window only a few samples,
    most of them waiting, and advice must not come and go with them."""
    compiled = samples = 0
    for frame in _recent(history, COMPILE_HISTORY_S):
        stacks = _frame_stacks(frame, main_pid)
        compiled += stacks.main_compiled_code
        samples += stacks.main_samples
    return compiled / samples if samples else 0.0


def _gpu_summary(frames: list[Frame]) -> GpuSummary:
    latest = frames[-1]
    if not latest.gpu.available:
        return GpuSummary(available=False, reason=latest.gpu.reason)
    per_frame = [_target_devices(f) for f in frames]
    devices = per_frame[-1]
    if not devices:
        return GpuSummary(available=True, reason="no GPU is used by the target's processes")
    assumed = _unattributed(frames[-1])
    readings = [d for ds in per_frame for d in ds]
    reasons: list[str] = []
    for d in devices:
        for reason in d.clock_event_reasons or ():
            if reason not in reasons:
                reasons.append(reason)
    used = [d.mem_used_bytes for d in devices if d.mem_used_bytes is not None]
    total = [d.mem_total_bytes for d in devices if d.mem_total_bytes is not None]
    return GpuSummary(
        devices=devices,
        available=True,
        util_pct=_mean(d.util_gpu_pct for d in readings),
        sm_clock_mhz=_mean(d.sm_clock_mhz for d in readings),
        max_sm_clock_mhz=_mean(d.max_sm_clock_mhz for d in readings),
        power_w=_mean(d.power_w for d in readings),
        power_limit_w=_mean(d.power_limit_w for d in readings),
        sm_active_pct=_mean(d.gpm_sm_active_pct for d in readings),
        tensor_active_pct=_mean(d.gpm_tensor_active_pct for d in readings),
        reasons=tuple(reasons),
        mem_used_bytes=sum(used) if used else None,
        mem_total_bytes=sum(total) if total else None,
        assumed=assumed,
    )


def _profiles(frames: Sequence[Frame], main_pid: int,
              peer_wait: str | None = None) -> tuple[ThreadProfile, ThreadProfile, ThreadProfile]:
    """(main thread, the main process's other threads, DataLoader workers) over the frames' stack counts."""
    main, others, workers = ThreadProfile(peer_wait=peer_wait), ThreadProfile(), ThreadProfile()
    for frame in frames:
        stacks = _frame_stacks(frame, main_pid)
        for count in stacks.main_counts:
            main.add(count)
        for count in stacks.other_counts:
            others.add(count)
        for count in stacks.worker_counts:
            workers.add(count)
    return main, others, workers


def _after_phase_change(frames: Sequence[Frame]) -> list[Frame] | None:
    """The frames after the latest one marked with a phase change, or None when none is marked."""
    for index in range(len(frames) - 1, -1, -1):
        if frames[index].stacks.phase_change:
            return list(frames[index + 1:])
    return None


def peer_wait(frame: Frame, main_pid: int, gpu: GpuSummary, wanting_cpu_pct: float | None) -> str | None:
    """How the main process, when it is a rank of a multi-rank job, waits for the other ranks where no
    collective frame shows: in backward (no GPU: DDP's reducer on gloo; any backward sample when its main thread
    wants a CPU less than QUIET_MAIN_THREAD_PCT of the time, on one or queued for one), at a GPU
    synchronisation (its GPU spins), or None (not a rank, or a GPU doing real work)."""
    main = frame.process(main_pid)
    if main is None or main.rank is None or (main.world_size is not None and main.world_size < 2):
        return None
    if not gpu.in_use and main.gpu_index is None:
        quiet = wanting_cpu_pct is not None and wanting_cpu_pct < QUIET_MAIN_THREAD_PCT
        return PEER_WAIT_BACKWARD_QUIET if quiet else PEER_WAIT_BACKWARD
    return PEER_WAIT_SYNC if gpu.spinning() else None


def _wanting_cpu(frames: Sequence[Frame], main_pid: int) -> float | None:
    """The main thread's time on a CPU or queued for one, percent of wall time (metric window mean)."""
    cpu = _mean(_main_field(f, main_pid, "main_thread_cpu_pct") for f in frames)
    if cpu is None:
        return None
    return cpu + (_mean(_main_field(f, main_pid, "main_thread_runqueue_pct") for f in frames) or 0.0)


def gather(history: Sequence[Frame], hang_after_s: float) -> Evidence:
    """Everything the rules need, from the recent end of `history` (oldest first, not empty)."""
    latest = history[-1]
    main_pid = _main_pid(latest)
    stack_frames = _recent(history, STACK_WINDOW_S)
    metric_frames = _recent(history, METRIC_WINDOW_S)
    gpu = _gpu_summary(metric_frames)
    waits_for_peers = peer_wait(latest, main_pid, gpu, _wanting_cpu(metric_frames, main_pid))

    main, others, workers = _profiles(stack_frames, main_pid, waits_for_peers)
    after_change = _after_phase_change(stack_frames)
    if after_change is not None:
        # The cheap signals moved (the sampler looked again): the samples before describe the earlier phase
        # and would hold the old verdict for a whole window. Once enough new ones are in, only they count.
        profiles = _profiles(after_change, main_pid, waits_for_peers)
        if profiles[0].samples >= PHASE_CHANGE_SAMPLES:
            stack_frames = after_change
            main, others, workers = profiles
    main_dump = _latest_main_dump(latest, main_pid)
    if not main.samples and main_dump is not None:
        # No sample window has finished yet: the latest dump stands in as one sample.
        main.add(StackCount(pid=main_dump.pid, tid=main_dump.tid, thread_name=main_dump.name,
                            idle=main_dump.idle, frames=main_dump.frames, count=1))

    worker_pids = [p.pid for p in _alive(latest) if p.role == ROLE_DATALOADER_WORKER]
    worker_cpu = {}
    for pid in worker_pids:
        value = _mean(f.process(pid).cpu_pct for f in metric_frames if f.process(pid) is not None)
        if value is not None:
            worker_cpu[pid] = value
    main_cpu = _mean(f.process(main_pid).cpu_pct for f in metric_frames if f.process(main_pid) is not None)
    tree_cpu = _mean(_tree_cpu(f) for f in metric_frames)
    compile_cpu = _mean(
        sum(p.cpu_pct or 0.0 for p in _alive(f) if p.role == ROLE_COMPILE_WORKER) or None for f in metric_frames)

    latest_main = _latest_main_stack(stack_frames, main_pid) or (main_dump.frames if main_dump else None)
    blocked_reading = latest_main is not None and classify_cached(latest_main, True).activity == IO
    state, stuck_for, progress_seen = _liveness(history, main_pid, hang_after_s, blocked_reading)
    unchanged_for, unchanged_stack = _unchanged_for(
        _recent(history, max(UNCHANGED_LOOKBACK_S, stuck_for + 1.0)), main_pid)
    stuck_stack, stuck_thread = unchanged_stack, "MainThread"
    if main_dump is not None and (stuck_stack is None or state == "hung"):
        stuck_stack, stuck_thread = main_dump.frames, main_dump.name or "main thread"
    if state == "hung" and _only_asleep(latest.process(main_pid), stuck_stack, main.samples):
        state = "sleeping"
    active_ticks = [(_tree_cpu(f) or 0.0) >= CPU_PROGRESS_PCT for f in stack_frames if _tree_cpu(f) is not None]

    return Evidence(
        latest=latest,
        main_pid=main_pid,
        stack_frames=stack_frames,
        metric_frames=metric_frames,
        main=main,
        others=others,
        workers=workers,
        worker_cpu=worker_cpu,
        main_cpu_pct=main_cpu,
        tree_cpu_pct=tree_cpu,
        effective_cpus=latest.cpu.effective_cpus,
        throttled_fraction=_mean(f.cpu.throttled_fraction for f in metric_frames),
        gpu=gpu,
        liveness=state,
        stuck_for_s=stuck_for,
        progress_seen=progress_seen,
        stuck_stack=stuck_stack,
        stuck_thread=stuck_thread,
        unchanged_for_s=unchanged_for,
        dead_children=_dead_children(_recent(history, max(STACK_WINDOW_S, stuck_for + 2.0)), main_pid),
        compile=compile_history(history, main_pid),
        compile_cpu_pct=compile_cpu,
        disk_wait_threads=sum(p.disk_wait_threads or 0 for p in _alive(latest)),
        read_chars_per_s=_mean(_io_chars_read(f) for f in metric_frames),
        main_write_per_s=_mean(_written(f, main_pid) for f in metric_frames),
        active_tick_share=(sum(active_ticks) / len(active_ticks)) if active_ticks else None,
        allowed_cpus=latest.host.allowed_cpus,
        others_busy_cpus=_mean(others_busy_cpus(f) for f in metric_frames),
        job_cpus=tree_cpu / 100.0 if tree_cpu is not None else None,
        steal_pct=_mean(f.host.steal_pct for f in metric_frames),
        main_thread_cpu_pct=_mean(_main_field(f, main_pid, "main_thread_cpu_pct") for f in metric_frames),
        main_thread_runqueue_pct=_mean(_main_field(f, main_pid, "main_thread_runqueue_pct") for f in metric_frames),
        peer_wait=waits_for_peers,
        ranks_on_node=latest.target.ranks_on_node or 1,
        gil=gil_summary(_recent(history, GIL_WINDOW_S), main_pid),
        compiled_code_share=_compiled_code_share(history, main_pid),
    )


def _only_asleep(process: ProcessSample | None, stuck_stack: tuple[StackFrame, ...] | None, samples: int) -> bool:
    """Silent, but nothing of a training step is waiting mid-work: a program that is not Python (`sleep`, a shell, a
    launcher between jobs) asleep in the kernel, or a DataLoader worker asleep waiting for its next index. Calling
    those hung (with a confidence) was the wrong word on screen. A Python main thread stuck somewhere stays hung, and
    so does a Python process whose stacks cannot be read: asleep there may well be stuck."""
    if not sleeps_in_kernel(process):
        return False
    if stuck_stack is None and not samples:
        return not is_python_command(process.cmdline) and not (process.name or "").startswith("python")
    return process.name == "pt_data_worker" or (stuck_stack is not None and is_worker_stack(stuck_stack))


def sleeps_in_kernel(process: ProcessSample | None) -> bool:
    """The process sleeps in the kernel (state S, every thread asleep): it waits for something, it is not at work."""
    return process is not None and process.alive and process.state == "sleeping" and \
        not process.runnable_threads and not process.disk_wait_threads


def _main_field(frame: Frame, main_pid: int, name: str) -> float | None:
    process = frame.process(main_pid)
    return getattr(process, name) if process is not None else None


def others_busy_cpus(frame: Frame) -> float | None:
    """CPUs' worth of time other processes took on the CPUs the target may use, in one tick."""
    busy, tree = frame.host.busy_cpus, _tree_cpu(frame)
    if busy is None or tree is None:
        return None
    return max(0.0, busy - tree / 100.0)


def _io_chars_read(frame: Frame) -> float | None:
    values = [p.read_chars_per_s for p in _alive(frame) if p.read_chars_per_s is not None]
    return sum(values) if values else None


def _written(frame: Frame, pid: int) -> float | None:
    """Bytes per second one process writes (write() calls, so page-cache writes count too)."""
    process = frame.process(pid)
    if process is None:
        return None
    return process.write_chars_per_s if process.write_chars_per_s is not None else process.write_bytes_per_s


def main_pid_of(frame: Frame) -> int:
    """The training process of the frame's tree: the main role, else the target itself."""
    return _main_pid(frame)


def main_thread_counts(frame: Frame, main_pid: int) -> tuple[StackCount, ...]:
    """The main thread's stack counts in one frame (memoised with the rest of the frame's summary)."""
    return _frame_stacks(frame, main_pid).main_counts


def target_gpu_util_pct(frames: Sequence[Frame]) -> float | None:
    """The target's GPUs' utilisation over the frames, mean; None where NVML read none of them."""
    return _mean(d.util_gpu_pct for f in frames for d in _target_devices(f))


def waits_on_busy_gpu(frame: Frame, pid: int) -> bool:
    """In this frame, the GPUs `pid` runs on (NVML's process list; else the target's) ran kernels at least
    GPU_WAIT_UTIL_PCT of the time: its main thread's idle samples are waits for the GPU."""
    devices = _target_devices(frame)
    own = [d for d in devices
           if any((p.local_pid if p.local_pid is not None else p.pid) == pid for p in d.processes)]
    util = _mean(d.util_gpu_pct for d in own or devices)
    return util is not None and util >= GPU_WAIT_UTIL_PCT
