"""The engine: attaches to a target PID and, once a tick, reads every probe into one Frame.

Each probe owns one outside system (proctree: /proc, cgroup: /sys/fs/cgroup, nvml: the GPU driver,
pyspy: the py-spy binary, progress: the target's log, flight_recorder: the ranks' Flight Recorders). The
stack sampler runs on its own threads at its own rate; a tick only drains what it gathered, so the tick
(default 1 s) and the stack rate are separate.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import psutil

from probes.frame import (
    ROLE_DATALOADER_WORKER,
    ROLE_OTHER,
    ROLE_RANK,
    Frame,
    GpuReading,
    MonitorOverhead,
    ProcessExit,
    ProcessSample,
    Role,
    StacksReading,
    TargetInfo,
)
from probes.jobs.gpus import with_gpu_indices
from probes.jobs.tracker import JobTracker
from probes.machine_records import KernelEvent, NcclRasReading
from probes.redact import redact_argv, redact_environ
from probes.sampling.pyspy import StackSampler
from probes.sampling.sampling_policy import DEFAULT_RATE_HZ, SETTLED_RATE_HZ, PhaseSignals
from probes.sampling.tree_sampling import TreePart, TreeRoles
from probes.sensors.cgroup import CgroupCpuProbe, CgroupMemoryProbe
from probes.sensors.flight_recorder import FlightRecorderProbe
from probes.sensors.hostcpu import HostCpuProbe
from probes.sensors.kernel_log import KernelLog, KernelLogView
from probes.sensors.nccl_ras import RasPoller, ras_address
from probes.sensors.nvml import NvmlGpuProbe
from probes.sensors.proctree import ProcessTreeProbe
from probes.sensors.progress import LogProgressProbe, log_owners

# The PIDs of the job's processes remembered for its kernel records (an OOM kill is logged as its victim dies, and
# the tree sees it gone a tick later): the last this many seen, ample for a node's ranks and their workers.
PIDS_REMEMBERED = 4096

DEFAULT_INTERVAL_S = 1.0
MIN_INTERVAL_S = 0.25


@dataclass(frozen=True)
class EngineConfig:
    interval_s: float = DEFAULT_INTERVAL_S
    stack_rate_hz: float | None = None  # None: adaptive, DEFAULT_RATE_HZ settling to SETTLED_RATE_HZ
    native: bool = False
    nonblocking: bool = True
    sample_stacks: bool = True
    read_gpu: bool = True
    log_path: str | None = None
    tokens_per_iter: int | None = None
    # Watch only the named process and its workers, not the job around it (its launcher and the other ranks).
    process_only: bool = False
    # Ask the ranks for a Flight Recorder dump once, at the first reading (--fr-dump): gputop is read-only otherwise.
    fr_dump: bool = False


def phase_signals(processes) -> dict[int, PhaseSignals]:
    """Each live process's cheap per-tick readings, for the sampler's phase-change detector."""
    signals = {}
    for p in processes:
        if not p.alive:
            continue
        io = [p.read_chars_per_s, p.write_chars_per_s, p.tcp_received_per_s, p.tcp_sent_per_s]
        known = [v for v in io if v is not None]
        signals[p.pid] = PhaseSignals(cpu_pct=p.cpu_pct, main_thread_cpu_pct=p.main_thread_cpu_pct,
                                      main_thread_runqueue_pct=p.main_thread_runqueue_pct,
                                      wakeups_per_s=p.main_thread_wakeups_per_s,
                                      io_bytes_per_s=sum(known) if known else None)
    return signals


def sampling_roles(processes) -> TreeRoles:
    """Each live process's part for the sampler's policy over the tree (probes/sampling/tree_sampling.py): a DataLoader
    worker of a known training process, a rank, or neither (it samples on its own)."""
    roles: dict[int, tuple[TreePart, int | None] | None] = {}
    for p in processes:
        if not p.alive:
            continue
        if p.role == ROLE_DATALOADER_WORKER and p.owner_pid is not None:
            roles[p.pid] = ("worker", p.owner_pid)
        elif p.role == ROLE_RANK:
            roles[p.pid] = ("rank", None)
        else:
            roles[p.pid] = None
    return roles


def _ras_address(target: TargetInfo, processes: Sequence[ProcessSample], gpu: GpuReading) -> tuple[str, int] | None:
    """Where the job's NCCL listens for RAS clients, where it looks like an NCCL job: ranks on GPUs, or NCCL settings
    in its environment. None for the rest: a CPU job is never asked."""
    environment = target.environment or {}
    on_gpus = any(p.role == ROLE_RANK and p.gpu_index is not None for p in processes) or \
        any(d.in_target for d in gpu.devices)
    if not on_gpus and not any(key.startswith("NCCL_") for key in environment):
        return None
    return ras_address(environment)


class Engine:
    """Reads the target once per tick(); call close() to stop the samplers it started."""

    def __init__(self, pid: int, config: EngineConfig = EngineConfig(), nvml=None, gpu=None,
                 kernel_log: KernelLog | KernelLogView | None = None) -> None:
        """nvml: a module with pynvml's API (tests pass a fake). gpu: a reader shared with other engines
        (nvml.SharedGpuReading, refreshed by its owner once per tick), which this engine does not close.
        kernel_log: the node's kernel log reader (tests pass one over a fake /dev/kmsg; several engines share one
        through a SharedKernelLog's views); by default /dev/kmsg, read by this engine."""
        self.pid = pid  # the PID the user named
        self.config = config
        self._seq = 0
        # The job around the named process: attached to a rank, the tree of its launcher is watched.
        self._jobs = None if config.process_only else JobTracker(pid)
        self.root_pid = self._jobs.root_pid if self._jobs is not None else pid
        root = self.root_pid
        self._tree = ProcessTreeProbe(root, redact=redact_argv, redact_environ=redact_environ)
        self._cgroup = CgroupCpuProbe(root)
        self._memory = CgroupMemoryProbe(root)
        self._host = HostCpuProbe(root)
        self._owns_gpu = gpu is None
        self._gpu = (gpu if gpu is not None else NvmlGpuProbe(nvml)) if config.read_gpu else None
        self._progress = LogProgressProbe(root, config.log_path, config.tokens_per_iter)
        self._collectives = FlightRecorderProbe()  # reads only ranks whose environment shows a recorder
        self._kernel_log = kernel_log if kernel_log is not None else KernelLog()
        self._ras = RasPoller()  # asks NCCL's RAS port only once the job looks like NCCL's
        self._pids_seen: deque[int] = deque(maxlen=PIDS_REMEMBERED)  # whose kernel records are this job's
        if config.fr_dump:
            self._collectives.request_dump()
        self._last_stacks: StacksReading | None = None  # the job layout reads the parents' stacks of last tick
        self._sampler: StackSampler | None = None
        if config.sample_stacks:
            if config.stack_rate_hz is not None:  # the user's rate holds still
                rate_hz, settled_rate_hz = config.stack_rate_hz, None
            else:  # look closely at first and whenever the picture moves, gently while it holds
                rate_hz, settled_rate_hz = DEFAULT_RATE_HZ, SETTLED_RATE_HZ
            self._sampler = StackSampler(rate_hz=rate_hz, native=config.native, nonblocking=config.nonblocking,
                                         settled_rate_hz=settled_rate_hz)
        self._programs: dict[int, tuple[str, ...]] = {}  # each live process's command line, last tick
        self._last_seen: dict[int, ProcessSample] = {}  # the last frame's processes, by PID
        self._me = psutil.Process()
        self._last_tick_end: float | None = None
        self._last_cpu: tuple[float, float] | None = None  # (monitor cpu s, sampler cpu s)

    def tick(self) -> Frame:
        started = time.monotonic()
        hints: dict[int, Role] = {}
        if self._sampler is not None:
            hints = {pid: ROLE_DATALOADER_WORKER for pid in self._sampler.worker_pids()}
        target, processes = self._tree.read(role_hints=hints)
        job = None
        unsampled: set[int] = set()
        if self._jobs is not None:
            job, processes = self._jobs.update(processes, self._last_stacks, self._tree.started_ticks())
            unsampled = self._jobs.unsampled_pids()
        live_pids = [p.pid for p in processes if p.alive and p.pid not in unsampled]
        if self._sampler is not None:
            self._resample_new_programs(self._sampler, processes)
            self._sampler.set_targets(live_pids)
            self._sampler.set_roles(sampling_roles(processes))
            # Before collecting: when the cheap signals moved, the sampler ends its record windows now.
            self._sampler.observe(time.monotonic(), phase_signals(processes))
            stacks = self._sampler.collect()
            self._last_stacks = stacks
        else:
            stacks = StacksReading(available=False, reason="stack sampling turned off (--no-stacks)")
        runnable = sum(p.runnable_threads or 0 for p in processes if p.alive)
        tree_cpu = sum(p.cpu_seconds or 0.0 for p in processes)
        cpu = self._cgroup.read(runnable_threads=runnable, tree_cpu_seconds=tree_cpu)
        host = self._host.read()
        memory = self._memory.read()
        if self._gpu is not None:
            gpu = self._gpu.read(self._tree.pid_aliases())
        else:
            gpu = GpuReading(available=False, reason="GPU reading turned off (--no-gpu)")
        processes = with_gpu_indices(processes, gpu)
        # The training process's log, not only the named one's: a rank's, or the python a shell wrapper runs.
        progress = self._progress.read(log_owners(processes, self.root_pid))
        collectives = self._collectives.read(processes)
        exits = self._as_last_seen(self._tree.exits())
        self._last_seen = {p.pid: p for p in processes}
        kernel_events = self._job_kernel_events(processes, exits)
        self._ras.want(_ras_address(target, processes, gpu))
        ras = self._ras.take()
        ended = time.monotonic()
        interval = ended - self._last_tick_end if self._last_tick_end is not None else self.config.interval_s
        self._last_tick_end = ended
        self._seq += 1
        return Frame(
            seq=self._seq,
            time=time.time(),
            interval_s=round(interval, 4),
            target=target,
            processes=processes,
            cpu=cpu,
            host=host,
            gpu=gpu,
            stacks=stacks,
            progress=progress,
            overhead=self._overhead(ended - started, interval),
            job=job,
            collectives=collectives,
            exits=exits,
            memory=memory,
            kernel_events=kernel_events,
            kernel_log_problem=self._kernel_log.reason,
            nccl_ras=NcclRasReading(ras[0], f"{ras[1].address[0]}:{ras[1].address[1]}", ras[1].answered, ras[1].raw,
                                    ras[1].reason) if ras is not None else None,
        )

    def _as_last_seen(self, exits: Sequence[ProcessExit]) -> tuple[ProcessExit, ...]:
        """Each ended process with its role and rank as the last tick's frame had them: the tree's walk knows a rank
        only as a child process until the job is read (a torchrun job's ranks ended as "its other PID")."""
        known = []
        for end in exits:
            seen = self._last_seen.get(end.pid)
            if seen is not None and seen.role != ROLE_OTHER:
                end = dataclasses.replace(end, role=seen.role, rank=seen.rank)
            known.append(end)
        return tuple(known)

    def _job_kernel_events(self, processes: Sequence[ProcessSample],
                           exits: Sequence[ProcessExit]) -> tuple[KernelEvent, ...]:
        """What the kernel logged since the last tick that concerns this job: every Xid (the diagnosis keeps those
        on the job's GPUs, by bus id), and the OOM kills and segfaults of processes this engine has seen in its
        tree (another job's crash on the node is not this one's)."""
        known = set(self._pids_seen)
        for pid in [p.pid for p in processes] + [e.pid for e in exits]:
            if pid not in known:
                self._pids_seen.append(pid)
                known.add(pid)
        return tuple(e for e in self._kernel_log.read_new() if e.kind == "xid" or e.pid in known)

    def request_flight_recorder_dump(self) -> None:
        """The user asked for a Flight Recorder dump (`f` in the TUI): done at the next tick, said in its frame
        (Frame.collectives.asks). Safe to call from another thread than the one that ticks."""
        self._collectives.request_dump()

    def awaited_dumps(self) -> list[str]:
        """Dumps asked for that have not come yet, one line each."""
        return self._collectives.awaited_lines()

    def _resample_new_programs(self, sampler: StackSampler, processes: Sequence[ProcessSample]) -> None:
        """A process whose command line changed ran a new program (exec keeps the PID): sample it afresh,
        so the old program's stacks do not linger under the new one and the new one is seen within ~1 s."""
        programs = {p.pid: p.cmdline or self._programs.get(p.pid, ()) for p in processes if p.alive}
        for pid, cmdline in programs.items():
            before = self._programs.get(pid)
            if before and cmdline and before != cmdline:
                command = " ".join([cmdline[0].rsplit("/", 1)[-1], *cmdline[1:]])[:120]
                sampler.restart([pid], f"PID {pid} now runs {command} (its command line changed, "
                                             "as after an exec): its stacks start afresh")
        self._programs = programs

    def _overhead(self, tick_seconds: float, interval: float) -> MonitorOverhead:
        try:
            times = self._me.cpu_times()
            monitor = times.user + times.system
        except psutil.Error:
            return MonitorOverhead(tick_seconds=tick_seconds)
        sampler = self._sampler.sampler_cpu_seconds() if self._sampler is not None else 0.0
        previous, self._last_cpu = self._last_cpu, (monitor, sampler)
        if previous is None or interval <= 0:
            return MonitorOverhead(tick_seconds=round(tick_seconds, 4))
        return MonitorOverhead(
            monitor_cpu_pct=round(100.0 * (monitor - previous[0]) / interval, 1),
            sampler_cpu_pct=round(100.0 * (sampler - previous[1]) / interval, 1),
            tick_seconds=round(tick_seconds, 4),
            behind=tick_seconds > self.config.interval_s,
        )

    def close(self) -> None:
        if self._sampler is not None:
            self._sampler.close()
        if self._gpu is not None and self._owns_gpu:
            self._gpu.close()
        self._progress.close()
        self._kernel_log.close()
        self._ras.close()


def run_ticks(engine: Engine, stop: threading.Event, duration_s: float | None = None) -> Iterator[Frame]:
    """Yield a frame every interval until `stop` is set or `duration_s` has passed.

    Ticks are scheduled against a fixed clock so a slow tick shortens the next sleep instead of
    drifting; a tick that overruns its slot is flagged `behind` by the engine.
    """
    interval = engine.config.interval_s
    start = time.monotonic()
    next_tick = start + interval
    while not stop.is_set():
        if duration_s is not None:
            next_tick = min(next_tick, start + duration_s)
        if stop.wait(max(0.0, next_tick - time.monotonic())):
            return
        yield engine.tick()
        if duration_s is not None and time.monotonic() - start >= duration_s - 1e-3:
            return
        next_tick += interval
        if next_tick < time.monotonic():  # fell behind: start afresh rather than firing a burst
            next_tick = time.monotonic() + interval
