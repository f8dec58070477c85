"""The facts the diagnosis rules read (Evidence), gathered once per call from a recent window of frames: stack
profiles (main thread, other threads, DataLoader workers), CPU, cgroup throttling, GPU readings, signs of progress
and how long they have been absent, and children that died.

Pure: frames in, an Evidence out. Its parts each have a module of their own: the look-back windows (windows.py),
each frame's stack summary, memoised so each frame is classified once (frame_stacks.py), the compiling over the
compile look-backs (compile_history.py), the GPUs (gpu_summary.py) and who held the GIL (gil.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from probes.diagnosis.compile_history import CompileHistory, compile_history, compiled_code_share
from probes.diagnosis.exit_causes import account, ended, kernel_records
from probes.diagnosis.frame_stacks import FrameStacks, Stack, frame_stacks, frames_sampled_enough
from probes.diagnosis.gil import GIL_WINDOW_S, GilSummary, gil_summary
from probes.diagnosis.gpu_summary import GpuSummary, gpu_summary, target_devices
from probes.diagnosis.stacks import (
    CHECKPOINT,
    IO,
    PEER_WAIT_BACKWARD,
    PEER_WAIT_SYNC,
    PeerWait,
    ThreadProfile,
    classify_cached,
)
from probes.diagnosis.step_facts import StepFacts, step_facts
from probes.diagnosis.windows import MAX_LOOKBACK_FRAMES, METRIC_WINDOW_S, STACK_WINDOW_S, mean, recent
from probes.frame import (
    ROLE_COMPILE_WORKER,
    ROLE_DATALOADER_WORKER,
    ROLE_MAIN,
    Frame,
    Liveness,
    ProcessSample,
    ProgressReading,
    StackCount,
    StackFrame,
    ThreadStack,
)
from probes.sampling.pyspy_output import is_worker_stack
from probes.sensors.process_facts import is_python_command
from probes.stack_identity import is_main_thread

# The kinds of progress a frame can show: the main thread's CPU time (or, on frames recorded before per-thread
# counters, the tree's), its producers' CPU, data reaching a blocked read, I/O, its stack moving, the GPU at work,
# the log's iteration.
ProgressSignal = Literal["cpu", "producers", "reads", "io", "stack", "gpu", "log"]
# Main-thread samples after a phase-change mark that let the stack window start at the mark: diagnose's
# THIN_SAMPLES, the fewest a verdict is reached on.
PHASE_CHANGE_SAMPLES = 10
# ... and, with fewer in the stack window and no phase change in it, how far back the window reaches for that many
SAMPLES_REACH_S = 60.0
UNCHANGED_LOOKBACK_S = 60.0  # how far back a still main-thread stack is followed
CPU_PROGRESS_PCT = 2.0  # processes' CPU below this (percent of one core, 10 ms tick) is "no CPU time"
# The main thread's CPU (schedstat, nanoseconds) above this is progress: 2 ms a second. A thread blocked
# in a lock or a read uses none; one waking each few seconds from a timed wait uses microseconds.
MAIN_THREAD_CPU_PROGRESS_PCT = 0.2
GPU_PROGRESS_UTIL_PCT = 5.0


@dataclass
class DeadChild:
    """A child process of the target seen lately that is gone now, or a zombie."""

    pid: int
    name: str
    role: str
    how: str  # "exited" or "zombie"
    ended: str | None = None  # how it ended, where the machine recorded it (probes/diagnosis/exit_causes.py)


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
    peer_wait: PeerWait | None = None
    ranks_on_node: int = 1  # the job's live ranks on this node, sharing its CPUs (1 for a lone process)
    gil: GilSummary | None = None  # who held the main process's GIL (only where another thread worked)
    # The main thread's samples over the compile look-back (COMPILE_HISTORY_S) that ran torch.compile's compiled
    # code: above 0, the stacks show the model compiled, and no advice tells it to compile.
    compiled_code_share: float = 0.0
    # What the step already does (compiled, attention, autocast, checkpointing, the optimizer, host syncs, ...), each
    # fact with where it was read (step_facts.py): what a lever offered later must check it does not already do.
    step: StepFacts = field(default_factory=StepFacts)
    unchanged_samples: int = 0  # the main thread's samples over unchanged_for_s, every one of them that one stack
    # Set where the hang rests on the log: (seconds since the log's last step line, which stuck_for_s is too; the
    # seconds watched, from gputop attaching or the look-back's start, in which nothing moved); None otherwise.
    log_still: tuple[float, float] | None = None

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


def _main_pid(frame: Frame) -> int:
    return next((p.pid for p in frame.processes if p.role == ROLE_MAIN), frame.target.pid)


def _alive(frame: Frame) -> list[ProcessSample]:
    return [p for p in frame.processes if p.alive and p.state != "zombie"]


def _tree_cpu(frame: Frame) -> float | None:
    values = [p.cpu_pct for p in _alive(frame) if p.cpu_pct is not None]
    return sum(values) if values else None


def _io_chars(frame: Frame) -> float | None:
    values = [(p.read_chars_per_s or 0.0) + (p.write_chars_per_s or 0.0)
              for p in _alive(frame) if p.read_chars_per_s is not None or p.write_chars_per_s is not None]
    return sum(values) if values else None


def _latest_main_dump(frame: Frame, main_pid: int) -> ThreadStack | None:
    """The main thread in the latest py-spy dump (each thread's current stack, with py-spy's idle flag)."""
    return next((t for t in frame.stacks.threads
                 if is_main_thread(t.pid, t.tid, t.name, t.frames, main_pid)), None)


def _producers(frame: Frame, main_pid: int) -> list[ProcessSample]:
    """The tree's other live processes (DataLoader workers, helpers): work the main thread may wait on."""
    return [p for p in _alive(frame) if p.pid != main_pid]


def _progress_signals(frame: Frame, older: Frame | None, stacks: FrameStacks,
                      newer_stacks: frozenset[Stack] | None, main_pid: int,
                      blocked_reading: bool) -> list[ProgressSignal]:
    """The kinds of progress one frame shows (empty: none).

    What counts is the main thread's own activity (its CPU time in nanoseconds, its reads and writes)
    and the other processes' (producers it may wait on): other threads of the main process do not count,
    so a heartbeat or logging thread that keeps running cannot hide a hung main thread. Frames recorded
    before per-thread counters existed fall back to the whole tree's CPU% and I/O.
    """
    signals: list[ProgressSignal] = []
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
    if any((d.util_gpu_pct or 0.0) >= GPU_PROGRESS_UTIL_PCT for d in target_devices(frame)):
        signals.append("gpu")
    if older is not None and _log_advanced(frame.progress, older.progress):
        signals.append("log")
    return signals


def _main_thread_io(main: ProcessSample) -> float:
    return (main.main_thread_read_chars_per_s or 0.0) + (main.main_thread_write_chars_per_s or 0.0)


def _data_arrived(main: ProcessSample) -> bool:
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
              blocked_reading: bool) -> tuple[Liveness, float, bool, tuple[float, float] | None]:
    """(state, seconds since the last progress, whether any progress was seen, and where the log's stillness made
    the hang: (how long the log has been still, the seconds watched in which nothing moved)).

    Walks back from the latest frame until it finds progress (bounded). Hung needs measured silence
    (CPU readings present) for at least `hang_after_s`; before anything is measured it is unknown. Where nothing
    moved in any frame watched, the log's last step line (its time, from the file's last write for lines written
    before gputop attached) says how long the job has been still before that: a log silent for longer than the
    hang threshold and a CPU counter that did not move between two readings are a hang from the second frame,
    not after watching for the threshold (issue 31: a log still for two minutes took 8 s to be called hung).
    """
    newest = len(history) - 1
    oldest = max(0, newest - MAX_LOOKBACK_FRAMES)
    latest_time = history[newest].time
    newer_stacks: frozenset[Stack] | None = None
    measured = False
    last_progress: float | None = None
    for index in range(newest, oldest - 1, -1):
        frame = history[index]
        older = history[index - 1] if index > 0 else None
        stacks = frame_stacks(frame, main_pid)
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
            return "progressing", stuck_for, True, None
    else:
        stuck_for = latest_time - observed_from
        log_still = _log_still_for(history[newest].progress, latest_time)
        if measured and log_still is not None and log_still > stuck_for and log_still >= hang_after_s:
            return "hung", log_still, True, (log_still, stuck_for)
    if measured and stuck_for >= hang_after_s:
        return "hung", stuck_for, last_progress is not None, None
    return ("progressing" if last_progress is not None else "unknown"), stuck_for, last_progress is not None, None


def _log_still_for(progress: ProgressReading | None, now: float) -> float | None:
    """Seconds since the log's last step line (None: no step line read). A log that was still before gputop
    attached is timed by the file's last write (probes/sensors/progress.py takes that for its backlog)."""
    if progress is None or progress.last_update is None or progress.format is None:
        return None
    return max(0.0, now - progress.last_update)


def _latest_main_stack(frames: list[Frame], main_pid: int) -> tuple[StackFrame, ...] | None:
    """The main thread's commonest stack in the latest sample window."""
    for frame in reversed(frames):
        counts = frame_stacks(frame, main_pid).main_counts
        if counts:
            return max(counts, key=lambda c: c.count).frames
    return None


def _unchanged_for(frames: list[Frame], main_pid: int) -> tuple[float, tuple[StackFrame, ...] | None, int]:
    """How long (seconds) the main thread's sampled stack has been one and the same, that stack, and how many
    samples caught it there. The same stack sample after sample is not one call: a loop that calls the same function
    again and again gives the same stack, line for line (its caller's line too), and the moment between two calls
    is too short to be sampled."""
    stack: tuple[StackFrame, ...] | None = None
    start: float | None = None
    samples = 0
    for frame in reversed(frames):
        stacks = frame_stacks(frame, main_pid)
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
        samples += sum(c.count for c in stacks.main_counts)
    if stack is None or start is None:
        return 0.0, None, 0
    return frames[-1].time - start, stack, samples


def _dead_children(frames: list[Frame], main_pid: int) -> list[DeadChild]:
    """Children seen in the window that are gone (or zombies) now, with how each ended where that was read."""
    latest = frames[-1]
    now = {p.pid: p for p in latest.processes}
    exits = ended(frames)
    kernel = kernel_records(frames)
    dead: dict[int, DeadChild] = {}

    def said(pid: int) -> str | None:
        return account(exits[pid], kernel).how if pid in exits else None

    for p in latest.processes:
        if p.pid != main_pid and (p.state == "zombie" or not p.alive):
            dead[p.pid] = DeadChild(p.pid, p.name, p.role, "zombie" if p.state == "zombie" else "exited", said(p.pid))
    for frame in frames[:-1]:
        for p in frame.processes:
            if p.pid != main_pid and p.pid not in now and p.pid not in dead:
                dead[p.pid] = DeadChild(p.pid, p.name, p.role, "exited", said(p.pid))
    return list(dead.values())


def _profiles(frames: Sequence[Frame], main_pid: int,
              peer_wait: PeerWait | None = None) -> tuple[ThreadProfile, ThreadProfile, ThreadProfile]:
    """(main thread, the main process's other threads, DataLoader workers) over the frames' stack counts."""
    main, others, workers = ThreadProfile(peer_wait=peer_wait), ThreadProfile(), ThreadProfile()
    for frame in frames:
        stacks = frame_stacks(frame, main_pid)
        for count in stacks.main_counts:
            main.add(count)
        for count in stacks.other_counts:
            others.add(count)
        for count in stacks.worker_counts:
            workers.add(count)
    return main, others, workers


def _after_phase_change(frames: Sequence[Frame], main_pid: int) -> list[Frame] | None:
    """The frames after the latest one marked with a phase change, or None when none is marked; less those whose
    main-process samples all come from windows that started before the mark. The window running when the signals
    moved is read out a tick or more later (py-spy writes its samples at its end): its samples are the phase before,
    and counted as after they held a data-bound verdict for 10 s past a switch to compute (a CI run, loaded)."""
    for index in range(len(frames) - 1, -1, -1):
        marked = frames[index]
        if marked.stacks.phase_change:
            return [f for f in frames[index + 1:] if not _sampled_before(f, main_pid, marked.time)]
    return None


def _sampled_before(frame: Frame, main_pid: int, moment: float) -> bool:
    """Every record window of the main process this frame carries started before `moment` (and it carries one)."""
    own = [w for w in frame.stacks.windows if w.pid == main_pid]
    return bool(own) and all(w.started < moment for w in own)


def _after_ended_save(frames: Sequence[Frame], main_pid: int) -> list[Frame] | None:
    """The frames after the last one whose main-thread samples were saving a checkpoint, or None when none is.

    A save is an episode: once it is over, its samples in the window describe what the job did, not what it does,
    and would hold "saving a checkpoint" for the rest of the window (a 2 s save is 5% of the 10 s window for 10 s
    after it ended). What recurs is said beside the verdict from the time shares (probes/diagnosis/shown.py)."""
    for index in range(len(frames) - 1, -1, -1):
        saving = ThreadProfile()
        for count in frame_stacks(frames[index], main_pid).main_counts:
            saving.add(count)
        if saving.share(CHECKPOINT) > 0:
            return list(frames[index + 1:])
    return None


def peer_wait(frame: Frame, main_pid: int, gpu: GpuSummary) -> PeerWait | None:
    """How the main process, when it is a rank of a multi-rank job, waits for the other ranks where no
    collective frame shows: in backward (no GPU: DDP's reducer on gloo, its waiting samples as the record
    windows' pairs measured them), at a GPU synchronisation (its GPU spins), or None (not a rank, or a GPU doing
    real work)."""
    main = frame.process(main_pid)
    if main is None or main.rank is None or (main.world_size is not None and main.world_size < 2):
        return None
    if not gpu.in_use and main.gpu_index is None:
        return PEER_WAIT_BACKWARD
    return PEER_WAIT_SYNC if gpu.spinning() else None


def gather(history: Sequence[Frame], hang_after_s: float) -> Evidence:
    """Everything the rules need, from the recent end of `history` (oldest first, not empty)."""
    latest = history[-1]
    main_pid = _main_pid(latest)
    stack_frames = recent(history, STACK_WINDOW_S)
    metric_frames = recent(history, METRIC_WINDOW_S)
    gpu = gpu_summary(metric_frames)
    waits_for_peers = peer_wait(latest, main_pid, gpu)

    main, others, workers = _profiles(stack_frames, main_pid, waits_for_peers)
    after_change = _after_phase_change(stack_frames, main_pid)
    if after_change is None and main.samples < PHASE_CHANGE_SAMPLES:
        # Too few samples in the window and no change in it: the samples before it are the same picture's (the
        # sampler settles only while the picture holds still), and the verdict is reached on them.
        stack_frames = frames_sampled_enough(history, main_pid, PHASE_CHANGE_SAMPLES, SAMPLES_REACH_S)
        main, others, workers = _profiles(stack_frames, main_pid, waits_for_peers)
    if after_change is None and main.share(CHECKPOINT) > 0:
        after_change = _after_ended_save(stack_frames, main_pid)
    if after_change is not None:
        # The cheap signals moved (the sampler looked again), or a save ended: the samples before describe the
        # earlier phase and would hold the old verdict for a whole window. Once enough new ones are in, only they
        # count.
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
        value = _cpu_pct(metric_frames, pid)
        if value is not None:
            worker_cpu[pid] = value
    main_cpu = _cpu_pct(metric_frames, main_pid)
    tree_cpu = mean(_tree_cpu(f) for f in metric_frames)
    compile_cpu = mean(
        sum(p.cpu_pct or 0.0 for p in _alive(f) if p.role == ROLE_COMPILE_WORKER) or None for f in metric_frames)

    latest_main = _latest_main_stack(stack_frames, main_pid) or (main_dump.frames if main_dump else None)
    blocked_reading = latest_main is not None and classify_cached(latest_main, True).activity == IO
    state, stuck_for, progress_seen, log_still = _liveness(history, main_pid, hang_after_s, blocked_reading)
    unchanged_for, unchanged_stack, unchanged_samples = _unchanged_for(
        recent(history, max(UNCHANGED_LOOKBACK_S, stuck_for + 1.0)), main_pid)
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
        throttled_fraction=mean(f.cpu.throttled_fraction for f in metric_frames),
        gpu=gpu,
        liveness=state,
        stuck_for_s=stuck_for,
        progress_seen=progress_seen,
        stuck_stack=stuck_stack,
        stuck_thread=stuck_thread,
        unchanged_for_s=unchanged_for,
        dead_children=_dead_children(recent(history, max(STACK_WINDOW_S, stuck_for + 2.0)), main_pid),
        compile=compile_history(history, main_pid),
        compile_cpu_pct=compile_cpu,
        disk_wait_threads=sum(p.disk_wait_threads or 0 for p in _alive(latest)),
        read_chars_per_s=mean(_io_chars_read(f) for f in metric_frames),
        main_write_per_s=mean(_written(f, main_pid) for f in metric_frames),
        active_tick_share=(sum(active_ticks) / len(active_ticks)) if active_ticks else None,
        allowed_cpus=latest.host.allowed_cpus,
        others_busy_cpus=mean(others_busy_cpus(f) for f in metric_frames),
        job_cpus=tree_cpu / 100.0 if tree_cpu is not None else None,
        steal_pct=mean(f.host.steal_pct for f in metric_frames),
        main_thread_cpu_pct=mean(_main_field(f, main_pid, "main_thread_cpu_pct") for f in metric_frames),
        main_thread_runqueue_pct=mean(_main_field(f, main_pid, "main_thread_runqueue_pct") for f in metric_frames),
        peer_wait=waits_for_peers,
        ranks_on_node=latest.target.ranks_on_node or 1,
        gil=gil_summary(recent(history, GIL_WINDOW_S), main_pid),
        compiled_code_share=compiled_code_share(history, main_pid),
        step=step_facts(history, main_pid, gpu),
        unchanged_samples=unchanged_samples,
        log_still=log_still,
    )


def _only_asleep(process: ProcessSample | None, stuck_stack: tuple[StackFrame, ...] | None, samples: int) -> bool:
    """Silent, but nothing of a training step is waiting mid-work: a program that is not Python (`sleep`, a shell, a
    launcher between jobs) asleep in the kernel, or a DataLoader worker asleep waiting for its next index. Calling
    those hung (with a confidence) was the wrong word on screen. A Python main thread stuck somewhere stays hung, and
    so does a Python process whose stacks cannot be read: asleep there may well be stuck."""
    if process is None or not sleeps_in_kernel(process):
        return False
    if stuck_stack is None and not samples:
        return not is_python_command(process.cmdline) and not (process.name or "").startswith("python")
    return process.name == "pt_data_worker" or (stuck_stack is not None and is_worker_stack(stuck_stack))


def sleeps_in_kernel(process: ProcessSample | None) -> bool:
    """The process sleeps in the kernel (state S, every thread asleep): it waits for something, it is not at work."""
    return process is not None and process.alive and process.state == "sleeping" and \
        not process.runnable_threads and not process.disk_wait_threads


def _cpu_pct(frames: Sequence[Frame], pid: int) -> float | None:
    """One process's CPU% over the frames, mean (None where no frame holds it)."""
    samples = (f.process(pid) for f in frames)
    return mean(p.cpu_pct for p in samples if p is not None)


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


