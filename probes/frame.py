"""The Frame: every reading of one tick, as a tree of frozen dataclasses that round-trips through JSON.

Each probe returns one of the readings below and never raises: a value it cannot read is None, and a
probe that cannot run at all says so with ``available=False`` and a ``reason`` a person can act on.
Live frames and frames replayed from a recording are the same type, so every consumer (snapshot,
diagnosis, TUI, tests) sees identical input.

Conventions: times are seconds (``time`` is Unix time), sizes are bytes, rates are per second,
percentages are 0-100, and stacks are listed innermost frame first, as py-spy prints them.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal, TypeVar

from probes.machine_records import KernelEvent, MemoryReading, NcclRasReading

# The log formats gputop reads, one parser each in probes/logformats/ (its FORMATS): the vocabulary a frame's
# progress and the snapshot carry, kept here with the others so that frame.py imports nothing of gputop's.
LogFormat = Literal["nanogpt", "hf_trainer", "lightning", "lightning_csv", "tqdm", "generic", "composer", "deepspeed",
                    "megatron", "litgpt", "llm_c", "fairseq", "torchtitan", "modded_nanogpt", "nanochat"]


FRAME_SCHEMA = "gputop.frame/1"

# Roles a process of the target's tree can play, declared once: the names below are its members, and ROLES lists
# them in this order.
Role = Literal["main", "launcher", "rank", "dataloader_worker", "compile_worker", "forkserver", "resource_tracker",
               "other"]
ROLE_MAIN: Final[Role] = "main"
ROLE_DATALOADER_WORKER: Final[Role] = "dataloader_worker"
ROLE_COMPILE_WORKER: Final[Role] = "compile_worker"
ROLE_FORKSERVER: Final[Role] = "forkserver"
ROLE_RESOURCE_TRACKER: Final[Role] = "resource_tracker"
ROLE_OTHER: Final[Role] = "other"
# Distributed jobs: the process that started the ranks (torchrun's agent, mp.spawn's parent, a shell script,
# srun), and one training process per GPU. A rank's own DataLoader workers keep their role and name their rank
# in ProcessSample.owner_pid.
ROLE_LAUNCHER: Final[Role] = "launcher"
ROLE_RANK: Final[Role] = "rank"
ROLES: tuple[Role, ...] = typing.get_args(Role)


@dataclass(frozen=True)
class TargetInfo:
    """The process gputop was pointed at."""

    pid: int
    alive: bool
    cmdline: tuple[str, ...] = ()  # secrets already redacted (probes.redact)
    exe: str | None = None
    python_version: str | None = None  # "3.11.7" when the target is a Python interpreter
    exited_at: float | None = None  # Unix time the target was first seen gone
    exit_reason: str | None = None
    # Variables that shape performance (threads, devices, NCCL, torch, tokenizers, W&B/HF), redacted.
    environment: dict[str, str] | None = None
    # Set on a rank's projection (probes/diagnosis/job.py): the live ranks on this node, which share its CPUs, so
    # advice sizes thread pools to a rank's share and not to the whole machine. None for a lone process.
    ranks_on_node: int | None = None


@dataclass(frozen=True)
class ProcessSample:
    """One process of the target's tree, read once this tick."""

    pid: int
    ppid: int | None
    role: Role
    name: str  # /proc/PID/comm
    cmdline: tuple[str, ...] = ()  # redacted
    state: str | None = None  # psutil status: running, sleeping, disk-sleep, zombie, ...
    alive: bool = True
    cpu_pct: float | None = None  # percent of one core since the last tick
    cpu_seconds: float | None = None  # cumulative user + system
    num_threads: int | None = None
    runnable_threads: int | None = None  # threads in state R now
    disk_wait_threads: int | None = None  # threads in state D now (uninterruptible, usually I/O)
    rss_bytes: int | None = None
    read_bytes_per_s: float | None = None
    write_bytes_per_s: float | None = None
    read_chars_per_s: float | None = None  # rchar: includes sockets and page-cache hits
    write_chars_per_s: float | None = None
    # The main thread alone (TID == PID), from /proc/PID/task/PID: finer than the process's CPU% (schedstat
    # counts nanoseconds) and not fooled by a background thread that keeps working while the main one hangs.
    main_thread_cpu_pct: float | None = None
    main_thread_runqueue_pct: float | None = None  # runnable but waiting for a CPU, percent of wall time
    main_thread_wakeups_per_s: float | None = None  # voluntary context switches: it blocked and was woken
    main_thread_preemptions_per_s: float | None = None  # involuntary ones: runnable, but the CPU went elsewhere
    main_thread_read_chars_per_s: float | None = None
    main_thread_write_chars_per_s: float | None = None
    # Bytes through the process's TCP sockets (the kernel's tcp_info; socket reads are not in /proc/PID/io).
    tcp_received_per_s: float | None = None
    tcp_sent_per_s: float | None = None
    tcp_peers: tuple[str, ...] = ()  # "address:port" of established connections, a few at most
    tcp_last_data_recv_s: float | None = None  # seconds since any of its connections last received data
    # A rank of a distributed job (role "rank"): from its environment (torchrun's agent sets RANK, LOCAL_RANK,
    # WORLD_SIZE, TORCHELASTIC_RESTART_COUNT); mp.spawn children carry none, so their rank is their start order.
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    restart_count: int | None = None
    cuda_visible_devices: str | None = None  # as the rank's environment sets it; None when unset
    gpu_index: int | None = None  # NVML index of the GPU the rank uses (its compute context, else its env)
    owner_pid: int | None = None  # the training process (rank or main) this helper process works for
    major_faults_per_s: float | None = None  # page faults that waited for a disk read (/proc/PID/stat majflt)
    # A DataLoader worker's /proc/PID/smaps_rollup, read every SMAPS_EVERY_S (probes/sensors/proctree.py), None
    # between reads: its own pages, and those it still shares with its parent and siblings (copy-on-read moves them).
    private_bytes: int | None = None
    shared_bytes: int | None = None


@dataclass(frozen=True)
class ProcessExit:
    """A process of the target's tree (the target itself, a rank, a DataLoader worker) that ended, and how, as far
    as /proc recorded it: a zombie keeps its exit status until its parent reaps it; one reaped between two ticks
    leaves none (then the kernel log or the job's own log may say, joined in the diagnosis)."""

    pid: int
    role: Role
    name: str
    seen_at: float  # Unix time gputop first saw it ended
    exit_code: int | None = None  # where it exited: its status
    signal: int | None = None  # where a signal ended it: its number (9: SIGKILL, 11: SIGSEGV)
    core_dumped: bool = False
    read_from: str = ""  # where the above came from, or why nothing is known
    rank: int | None = None  # a rank of a job: its number, as the job was last read before it ended


@dataclass(frozen=True)
class CpuReading:
    """The CPU the target may use (cgroup quota, affinity) and how much of it it gets."""

    cgroup_version: str | None = None  # "v1", "v2", or None when no cgroup could be read
    cgroup_path: str | None = None  # the target's cgroup, relative to the controller's mount
    quota_cpus: float | None = None  # cpu.max / cfs quota as CPUs, minimum over the ancestor chain
    quota_source: str | None = None  # the directory whose limit is the minimum
    period_us: int | None = None
    affinity_cpus: int | None = None  # CPUs in the target's affinity mask
    effective_cpus: float | None = None  # min(affinity, quota)
    usage_cpus: float | None = None  # the cgroup's (or, lacking it, the tree's) CPU use, in CPUs
    throttled_fraction: float | None = None  # share of CFS periods throttled since the last tick
    throttled_seconds_per_s: float | None = None
    nr_periods: int | None = None  # cumulative counters, as read
    nr_throttled: int | None = None
    throttled_seconds_total: float | None = None
    pressure_some_avg10: float | None = None  # cpu.pressure "some avg10", percent
    runnable_threads: int | None = None  # across the target's tree
    reason: str | None = None  # why something above is None


@dataclass(frozen=True)
class HostCpuReading:
    """How busy the CPUs the target may run on are, whoever uses them (from /proc/stat)."""

    online_cpus: int | None = None
    allowed_cpus: int | None = None  # CPUs in the target's affinity mask
    busy_cpus: float | None = None  # CPUs' worth of time spent on those CPUs since the last tick, by anyone
    steal_pct: float | None = None  # share of their time the hypervisor gave to other guests
    runnable_tasks: int | None = None  # machine-wide, now (procs_running)
    pressure_some_avg10: float | None = None  # /proc/pressure/cpu "some avg10", percent
    reason: str | None = None


@dataclass(frozen=True)
class GpuProcess:
    """A compute process NVML lists on a device."""

    pid: int  # as NVML reports it (a host PID inside containers)
    used_memory_bytes: int | None = None
    in_target: bool = False  # belongs to the target's process tree
    local_pid: int | None = None  # the PID in our namespace, when it maps


@dataclass(frozen=True)
class GpuDevice:
    """One GPU, read once this tick. Any field the driver does not support is None."""

    index: int
    name: str | None = None
    uuid: str | None = None
    sm_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None  # enforced limit
    # The most the board lets the limit be set to (NVML's power management limit constraints): a limit already
    # there cannot be raised. None where the driver does not say.
    power_max_limit_w: float | None = None
    util_gpu_pct: float | None = None  # a kernel was running; says nothing of how busy the SMs were
    util_mem_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    temperature_c: float | None = None
    clock_event_reasons: tuple[str, ...] | None = None  # e.g. ("sw_power_cap",); () = none active
    gpm_sm_active_pct: float | None = None  # Hopper GPM metrics, where supported
    gpm_sm_occupancy_pct: float | None = None
    gpm_tensor_active_pct: float | None = None
    gpm_dram_bw_pct: float | None = None
    gpm_fp16_active_pct: float | None = None  # non-tensor math by precision, share of time (GPM)
    gpm_fp32_active_pct: float | None = None
    gpm_fp64_active_pct: float | None = None
    gpm_pcie_rx_bytes_per_s: float | None = None  # traffic into (rx) and out of (tx) the GPU (GPM)
    gpm_pcie_tx_bytes_per_s: float | None = None
    gpm_nvlink_rx_bytes_per_s: float | None = None
    gpm_nvlink_tx_bytes_per_s: float | None = None
    processes: tuple[GpuProcess, ...] = ()
    in_target: bool = False  # some process of the target's tree runs on it
    # The machine's own faults (sensors/nvml.py: read every 10 s at most, carried between). None where not reported
    # (ECC off; row remapping before Ampere, retired pages from Ampere on; no NVLink).
    pci_bus_id: str | None = None  # "00000000:3B:00.0", the form kernel_log gives Xid lines' bus ids
    ecc_uncorrected_volatile: int | None = None  # uncorrected (double-bit) ECC errors since the driver loaded
    ecc_uncorrected_aggregate: int | None = None  # ... over the GPU's lifetime
    ecc_corrected_volatile: int | None = None  # corrected (single-bit) ECC errors since the driver loaded
    remapped_rows_uncorrectable: int | None = None  # memory rows remapped after an uncorrectable error (Ampere+)
    remap_pending: bool | None = None  # a row remap waits for the GPU's reset to take effect
    remap_failed: bool | None = None  # a remap failed: the GPU needs service
    retired_pages: int | None = None  # pages retired for ECC errors (before Ampere)
    retired_pages_pending: bool | None = None  # a page retirement waits for the GPU's reset (before Ampere)
    pcie_replays: int | None = None  # PCIe link replays, cumulative: a flaky link or riser
    nvlink_errors: int | None = None  # NVLink data-link replays, recoveries and CRC errors over the active links


@dataclass(frozen=True)
class GpuReading:
    available: bool
    reason: str | None = None  # why not available, or what is partially missing
    driver_version: str | None = None
    devices: tuple[GpuDevice, ...] = ()


@dataclass(frozen=True)
class StackFrame:
    function: str  # qualname on Python 3.11+ (e.g. "Class.method")
    file: str  # full path as the interpreter sees it
    line: int = 0
    native: bool = False  # a native (C/C++) frame, present only with native sampling
    # Set on each instance by __post_init__; declared ClassVar so that it is no field (never compared, recorded or
    # part of the snapshot).
    _hash: ClassVar[int]

    def __post_init__(self) -> None:
        # The diagnosis keys counters and caches on whole stacks (tuples of these) for every rank's window each
        # tick: a tuple's hash is not kept, so each lookup hashed every frame's fields again (on a node's job,
        # most of the per-rank diagnosis). The value is the one the dataclass would compute; it is not a field.
        object.__setattr__(self, "_hash", hash((self.function, self.file, self.line, self.native)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):
        return StackFrame, (self.function, self.file, self.line, self.native)  # the hash is made again where loaded


@dataclass(frozen=True)
class ThreadStack:
    """A thread's stack as of one sample."""

    pid: int
    tid: int
    name: str | None = None
    idle: bool = False  # py-spy judged it idle (waiting, sleeping)
    owns_gil: bool = False
    frames: tuple[StackFrame, ...] = ()  # innermost first
    # Unix time the dump that took this stack ended: a process's latest dump can be seconds old (dumps are spaced
    # out; a failing one keeps the last), and "now" must say how old. None in recordings made before it was kept.
    dumped_at: float | None = None


@dataclass(frozen=True)
class StackCount:
    """How many samples this tick saw one exact stack on one thread."""

    pid: int
    tid: int
    thread_name: str | None
    idle: bool
    frames: tuple[StackFrame, ...]  # innermost first
    count: int


@dataclass(frozen=True)
class GilSamples:
    """Who held the GIL in one process, from ``py-spy record --gil`` windows that finished this tick.

    py-spy looked ``samples`` times; at each look at most one thread held the GIL, and ``holders`` counts
    those looks per thread and stack (a look at which nobody held it counts in ``samples`` only)."""

    pid: int
    samples: int
    holders: tuple[StackCount, ...] = ()


@dataclass(frozen=True)
class SampledWindow:
    """One py-spy record window that finished this tick: whose, when, how long, how many samples. Shows who of a
    many-process tree was sampled when (probes/sampling/tree_sampling.py: alike workers take turns)."""

    pid: int
    started: float  # wall-clock time (time.time()) the window started
    seconds: float
    samples: int
    # The rate py-spy was asked for (a close look fast; a settled window or a worker's turn 1 Hz). Not samples /
    # seconds: py-spy takes a set number of samples (length x rate) at random, exponentially spaced times, so a
    # 10 s turn at 1 Hz ran 6.4-18.2 s of wall time for its 9 samples (20 windows, one sleeping target).
    rate_hz: float | None = None
    # Of `seconds`, the part py-spy was sampling: from its first sample to the window's end. The rest is its
    # start-up (attaching, reading the interpreter), which no sample covers: a second or more on a crowded machine.
    # None where it was not seen (recordings made before it was kept): the window then counts as sampled throughout.
    sampled_seconds: float | None = None


@dataclass(frozen=True)
class StacksReading:
    available: bool
    reason: str | None = None  # why not available, with the fix
    sampler: str | None = None  # e.g. "py-spy 0.4.0 (nonblocking)"
    rate_hz: float | None = None  # the asked-for rate per process
    achieved_rate_hz: float | None = None  # samples per second per process actually taken this tick
    samples: int = 0  # samples (process dumps) taken this tick
    native: bool = False
    threads: tuple[ThreadStack, ...] = ()  # each thread's latest stack
    counts: tuple[StackCount, ...] = ()  # samples taken this tick, grouped by identical stack
    errors: tuple[str, ...] = ()  # per-process failures this tick that did not stop sampling
    # Why no stack of the target can be read at all, in a few words ("ptrace denied", "py-spy missing", "not a
    # Python process"); `reason` has the whole story and the fix. The verdict is then "cannot see", not a guess.
    blocked: str | None = None
    # Set on the tick the cheap signals (CPU%, wake-ups, I/O, the process set) moved, with why: stack sampling
    # looked again at once, and the counts in this frame and earlier ones describe the phase before.
    phase_change: str | None = None
    # Who held the GIL, per process, from the GIL windows that finished this tick (run only where a thread
    # other than the main one was seen working: see probes/sampling/pyspy.py).
    gil: tuple[GilSamples, ...] = ()
    # The record windows whose samples this tick carries, one per window (who got samples, when).
    windows: tuple[SampledWindow, ...] = ()


# What a failure line of the job's log says (probes/logformats/failures.py recognises them): a Python exception, CUDA
# out of memory, a collective's timeout (NCCL's watchdog, gloo's), a lost gloo peer, a DataLoader worker's death, a
# rank's exit as torchrun reports it, torchrun's own ChildFailedError.
FailureKind = Literal["exception", "cuda_oom", "nccl_timeout", "nccl_error", "gloo_timeout", "gloo_peer_lost",
                      "worker_killed", "worker_exited", "rank_failed", "launcher_failed"]


@dataclass(frozen=True)
class LogFailure:
    """One failure line of the job's log, in its own words (shortened, secrets hidden), and what it names."""

    kind: FailureKind
    text: str  # without a "[rank0]: " prefix or a C++ log header
    rank: int | None = None  # where printed ("[rank0]: ", "[Rank 3]", torchrun's failure table)
    pid: int | None = None  # the process it names (a DataLoader worker, a rank in torchrun's table)
    signal: int | None = None  # the signal that ended that process, where printed (9 for "Killed", SIGKILL)
    exit_code: int | None = None  # its exit status, where printed
    logged_at: float | None = None  # Unix time the line reached the log, as the log probe timed it


@dataclass(frozen=True)
class ProgressReading:
    """The target's own progress, parsed from its log (filled by the log probe)."""

    source: str | None = None  # the log file read
    format: LogFormat | None = None  # which parser of probes/logformats/ read the last progress line
    iteration: int | None = None
    seconds_per_iter: float | None = None
    tokens_per_s: float | None = None
    reported_mfu_pct: float | None = None
    reported_tflops_per_gpu: float | None = None  # achieved TFLOP/s per GPU as the log printed it (Megatron-LM)
    # The log's own tokens/s (nanochat's tok/sec, torchtitan's tps, llm.c's tok/s): whose tokens it counts is its
    # format's printed_tokens_per_s_over.
    reported_tokens_per_s: float | None = None
    last_line: str | None = None
    last_update: float | None = None  # Unix time the last progress line was seen
    # How seconds_per_iter was worked out: "step counter" (the pace's rule, probes/pace.py: timed from successive
    # step lines over the window), else, before the counter has moved, from which printed figure (a throughput:
    # "CurrSamplesPerSec ÷ 32 samples per step"; None where the log printed the time itself).
    derived_from: str | None = None
    # The log's own time per step averaged over the counter's window, kept only where it disagrees with the
    # counter by more than 25% (a printed time covering one micro-step, or only the compute).
    printed_seconds_per_iter: float | None = None
    printed_from: str | None = None  # what that printed figure was worked out from; None where printed as a time
    log_of: str | None = None  # whose log was read when gputop chose it: "rank 0 (PID 4242)", "python (PID 12)"
    # Why there is no pace, in one line (set only when source is None): no log file, or no step lines in it.
    no_pace: str | None = None
    failures: tuple[LogFailure, ...] = ()  # the log's last failure lines, oldest first


@dataclass(frozen=True)
class MonitorOverhead:
    """What gputop itself costs, so the user can see it."""

    monitor_cpu_pct: float | None = None  # gputop process, percent of one core
    sampler_cpu_pct: float | None = None  # py-spy children, percent of one core
    tick_seconds: float | None = None  # how long collecting this frame took
    behind: bool = False  # sampling fell behind its schedule


# What limits the target, and whether it moves: the vocabulary of every verdict (snapshot schema /1).
Bottleneck = Literal[
    "gpu_bound", "gpu_throttled", "data_bound", "io_bound", "cpu_bound", "cpu_throttled", "comms_bound",
    "compile_warmup", "checkpoint_save", "idle", "cannot_see", "unknown", "gil_contention", "memory_bound",
]
# "sleeping": silent for the hang threshold, but the process only sleeps in the kernel (state S) and is not Python
# (`sleep`, a shell) or is a DataLoader worker waiting for its next index: nothing is stuck mid-step, so not hung.
Liveness = Literal["progressing", "hung", "sleeping", "exited", "unknown"]
BOTTLENECKS: tuple[Bottleneck, ...] = typing.get_args(Bottleneck)
LIVENESS_STATES: tuple[Liveness, ...] = typing.get_args(Liveness)
# How a job was started: one name per launcher of probes/jobs/launchers/ (its LAUNCHERS tuple, in the same
# order; tests/unit/test_launchers.py holds the two to each other). "ranks": RANK set by a launcher gputop does not
# know; "launched": one Python training process under a launcher (bash, uv run, a container init).
JobKind = Literal["accelerate", "deepspeed", "torchrun", "mpirun", "slurm", "lightning", "ranks", "mp.spawn",
                  "launched"]


@dataclass(frozen=True)
class Verdict:
    """diagnose(history): which bottleneck, hung versus slow, with the evidence and the fix."""

    bottleneck: Bottleneck = "unknown"
    liveness: Liveness = "unknown"
    confidence: float = 0.0
    evidence: tuple[str, ...] = ()
    advice: tuple[str, ...] = ()
    since: float | None = None  # Unix time this bottleneck/liveness pair was first concluded
    # Seconds since the last sign of progress (since watching began when none was seen); None once exited.
    # Added for /metrics (gputop_last_progress_age_seconds): the hang alert wants the silence, not only its verdict.
    stalled_s: float | None = None
    # The most the verdict's fix can win, times faster, from the time shares over the last minutes
    # (probes/diagnosis/shares.py); None where its fix has no measured phase. Set on the verdict as shown.
    max_speedup: float | None = None
    # Where under 3 of the samples fell outside that phase, no bound is measured, only a floor: at least this many
    # times faster (n / 3 with none outside, at 95%; shares.max_speedup). None wherever max_speedup is given.
    min_speedup: float | None = None
    # The phase it names is a one-time cost that ends by itself (torch.compile's warm-up): no fix removes it, so
    # no max_speedup is promised for it.
    one_time_cost: bool = False
    # What the step already does, each fact with where it was read (probes/diagnosis/step_facts.py): what the
    # levers in the advice were checked against, so a person can see why one was not offered.
    step: tuple[str, ...] = ()
    # What the verdict rests on, for the words that say how far to trust it (probes/diagnosis/support.py; `confidence`
    # is a score the hysteresis weighs, not a probability): the main thread's samples in its stack window (None where
    # not counted), and whether its rule reads counters (NVML, the cgroup) rather than stacks.
    samples: int | None = None
    from_counters: bool = False


@dataclass(frozen=True)
class JobInfo:
    """The distributed job (or the training process under a launcher) found from the PID gputop was given.

    None on a Frame whose target is itself the one training process. The Frame's ``target`` is the root of
    the watched tree (the launcher when there is one), so the job ends when its launcher does.
    """

    kind: JobKind
    attached_pid: int  # the PID the user named
    root_pid: int  # the process whose tree is watched
    launcher_pid: int | None = None
    run_id: str | None = None  # TORCHELASTIC_RUN_ID: names the job across nodes
    world_size: int | None = None
    local_world_size: int | None = None
    rank_pids: tuple[int, ...] = ()  # live training processes on this node, by rank
    selected_pid: int | None = None  # the rank the user attached to (selected first in the TUI)
    # One line for the user, e.g. "attached to bash (PID 10): watching python train.py (PID 12) under it".
    note: str | None = None
    slurm_step: str | None = None  # the Slurm job step whose tasks are watched, JOBID.STEP ("12.0")
    # The Slurm job the ranks run in, whatever launched them (torchrun under srun too): JOBID.STEP, or JOBID in a
    # batch script. The same on every node of the job, where launcher PIDs and hostnames differ (/metrics job_id).
    slurm_job: str | None = None
    # The watched tree is a client (srun, salloc) of a job whose training processes are not in it: nothing there
    # to judge, so the job's liveness is unknown, never hung.
    training_elsewhere: bool = False
    # The job knows its world size (probes/jobs/world.py): ranks this node should hold that were never seen here
    # (exited before gputop attached), and ranks on other nodes as inclusive (first, last) ranges.
    missing_ranks: tuple[int, ...] = ()
    ranks_elsewhere: tuple[tuple[int, int], ...] = ()
    # Where no launcher states this node's share: why every rank is known to run on this machine
    # (probes/jobs/locality.py; "MASTER_ADDR 127.0.0.1"), so that missing_ranks are not running; None: not known.
    one_machine: str | None = None
    # Ranks of the world running on this machine outside the watched tree (started apart), as (rank, PID).
    ranks_outside: tuple[tuple[int, int], ...] = ()
    # Helpers left running by a missing rank (a `sleep` it started, a forked child), as (rank, PID): they carry its
    # environment and hold TCP connections open, which keeps its peers waiting where gloo would fail them.
    rank_leftovers: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class CollectiveRecord:
    """One collective as PyTorch's Flight Recorder logged it on one rank (probes/sensors/flight_recorder.py)."""

    seq: int  # collective_seq_id: the N-th collective of its process group, the same N on every rank
    op: str  # "all_reduce" (profiling_name without its backend prefix "gloo:" / "nccl:")
    backend: str | None = None  # "gloo", "nccl"
    input_bytes: int | None = None  # the inputs' sizes times their dtypes' widths; None for an unknown dtype
    entered_at: float | None = None  # Unix time the rank enqueued it (time_created_ns)
    completed: bool = False  # retired, or its state says completed


@dataclass(frozen=True)
class GroupCollectives:
    """Where one rank stands in one process group: the last collective it entered and the last it completed."""

    pg_id: str
    pg_name: str | None = None  # "default_pg", or the name new_group(group_desc=...) gave
    last_entered: int | None = None  # highest collective_seq_id enqueued
    last_completed: int | None = None  # highest one completed
    pending: tuple[CollectiveRecord, ...] = ()  # entered, not completed, oldest first (a few at most)
    last: CollectiveRecord | None = None  # the latest entry, completed or not


@dataclass(frozen=True)
class RankCollectives:
    """One rank's Flight Recorder, as read from outside the job (or why it could not be read)."""

    rank: int | None
    pid: int
    source: str  # "worker_server", "dump_file", "none"
    path: str | None = None  # the socket or the dump file read
    available: bool = False
    reason: str | None = None  # why not available, or what the job would need to expose it
    groups: tuple[GroupCollectives, ...] = ()
    read_at: float | None = None  # Unix time of the dump (a dump file's mtime; the tick's time for a live read)
    trigger: str | None = None  # a way to make the job dump that the job enabled; used only when the user asks


@dataclass(frozen=True)
class FlightRecorderAsk:
    """What gputop did about one training process when the user asked for a Flight Recorder dump (--fr-dump, or
    `f` in the TUI), or what came of it later; `line` is said on screen or stderr as it happens."""

    rank: int | None
    pid: int | None
    # "pipe_written": asked the rank to dump through NCCL's debug-info pipe; "dumped": the dump it wrote was read;
    # "no_dump": none came within the wait; "read_now": its worker server was read at once (read-only);
    # "not_asked": no trigger (the line says what to set) or the pipe could not be written (the line says why)
    action: str
    line: str
    path: str | None = None  # the pipe written, the dump read or the socket asked
    at: float | None = None  # Unix time


@dataclass(frozen=True)
class CollectivesReading:
    """The Flight Recorders of the job's ranks that opted in; ranks that did not are absent."""

    ranks: tuple[RankCollectives, ...] = ()
    # What this tick did on the user's request for a dump, and dumps asked for that arrived: empty on other ticks.
    asks: tuple[FlightRecorderAsk, ...] = ()


@dataclass(frozen=True)
class Frame:
    seq: int
    time: float  # Unix time at the end of the tick
    interval_s: float
    target: TargetInfo
    processes: tuple[ProcessSample, ...] = ()
    cpu: CpuReading = field(default_factory=CpuReading)
    host: HostCpuReading = field(default_factory=HostCpuReading)
    gpu: GpuReading = field(default_factory=lambda: GpuReading(available=False, reason="not read"))
    stacks: StacksReading = field(default_factory=lambda: StacksReading(available=False, reason="not read"))
    progress: ProgressReading | None = None
    overhead: MonitorOverhead = field(default_factory=MonitorOverhead)
    job: JobInfo | None = None  # a distributed job or a launched training process; None for a lone process
    # The ranks' Flight Recorders, where a rank's environment shows one gputop can read; None when none does.
    collectives: CollectivesReading | None = None
    # The node that read this frame, set by `gputop agent` (SLURMD_NODENAME or the hostname) so frames of several
    # nodes can be told apart once merged; None on a one-node run. PIDs in the frame are that node's own.
    node: str | None = None
    # Processes of the tree that ended this tick, with how where /proc still said (probes/sensors/proctree.py)
    exits: tuple[ProcessExit, ...] = ()
    memory: MemoryReading = field(default_factory=MemoryReading)  # its memory cgroup (probes/sensors/cgroup.py)
    # What the kernel logged this tick of the node's faults: Xids, OOM kills, segfaults (probes/sensors/kernel_log.py;
    # the first tick's carry the minutes before gputop attached)
    kernel_events: tuple[KernelEvent, ...] = ()
    kernel_log_problem: str | None = None  # why the kernel log cannot be read here, where it cannot
    nccl_ras: NcclRasReading | None = None  # NCCL's RAS port's answer that came this tick (every ~10 s), if one did
    schema: str = FRAME_SCHEMA

    def process(self, pid: int) -> ProcessSample | None:
        return next((p for p in self.processes if p.pid == pid), None)


@dataclass(frozen=True)
class RankVerdict:
    """One rank's own verdict (diagnose() on its projection) and how much of its time it waits for the others."""

    rank: int
    pid: int
    verdict: Verdict
    local_rank: int | None = None
    gpu_index: int | None = None
    cpu_pct: float | None = None
    # Share of its main thread's samples waiting in a collective (an all_reduce/barrier/all_gather frame, or
    # DDP's reducer wait inside backward at low CPU). None without samples. NVRx's straggler score, passively.
    collective_wait_ratio: float | None = None
    samples: int = 0  # its main thread's samples in the window
    # The node it runs on, in a job merged across nodes (probes/monitoring/cluster.py); None on a one-node run. Its
    # pid is
    # that node's own.
    node: str | None = None


JobFinding = Literal["straggler", "hung_rank", "rank_exited", "shared", "mixed", "single", "elsewhere"]


@dataclass(frozen=True)
class JobVerdict:
    """The verdict on a whole job: which rank holds the others back, and where; each rank's own beside it."""

    verdict: Verdict  # for the job: what the verdict pane, the snapshot and /metrics show first
    finding: JobFinding
    ranks: tuple[RankVerdict, ...] = ()  # by rank
    responsible_rank: int | None = None  # the straggler, the stuck rank or the exited one


# --- JSON round trip -------------------------------------------------------------------------------

T = TypeVar("T")


def to_jsonable(obj: Any) -> Any:
    """A dataclass tree as plain dicts, lists and scalars (tuples become lists)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    return obj


_HINTS_CACHE: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS_CACHE.get(cls)
    if hints is None:
        hints = typing.get_type_hints(cls)
        _HINTS_CACHE[cls] = hints
    return hints


def _convert(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if arg is type(None):
                continue
            return _convert(arg, value)
    if origin is tuple:
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        return tuple(_convert(inner, v) for v in value)
    if origin is dict:
        return dict(value)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_jsonable(tp, value)
    if tp is float and isinstance(value, int):
        return float(value)
    return value


def from_jsonable(cls: type[T], data: dict[str, Any]) -> T:
    """Rebuild a dataclass tree written by to_jsonable; unknown keys (newer writers) are ignored."""
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name])
    return cls(**kwargs)
