"""The job picker's census: the training jobs on this machine, each described for a person choosing one.

`gputop` with no PID (the picker, `gputop --list`) asks :class:`JobCensus` what runs here. A training job is a
Python process that imports torch (its /proc/PID/maps holds libtorch or torch's _C), a launcher LAUNCHERS
knows, a process whose environment names its rank, or one holding a GPU context: probes/jobs/follow.py finds
them, each once from its root, exactly as `gputop serve --follow` does. Each job is then read the way
`gputop --pid` reads it: its tree through probes/sensors/proctree.py, its launcher, ranks and workers through
probes/jobs/tracker.py, its GPUs through probes/sensors/nvml.py and probes/jobs/gpus.py. CPU% is a rate, so a job's
first scan has none: the first answer (:func:`list_jobs`, the picker's first screen) is one scan, shown at once, and
only the picker's next scans, from the same census, bring each job's CPU%.

Sorting and filtering (:func:`sort_jobs`, :func:`job_matches`) are pure functions shared by the picker's
screen and `--list`. Nothing here raises: a process that ends while being read drops out of the list.

:func:`not_a_training_job` answers `gputop --pid PID` for a PID that names no job, with the jobs this census
finds: a process that is not Python and that no launcher claims, whose tree either holds gputop itself (the
census never lists such a tree, probes/jobs/root.py never watches one) or is an init's (PID 1 here or in a
container) that holds no training job or several. A container init that started one job stays that job's launcher.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from probes.frame import ROLE_COMPILE_WORKER, ROLE_DATALOADER_WORKER, GpuReading
from probes.jobs.follow import find_training_jobs
from probes.jobs.gpus import with_gpu_indices
from probes.jobs.launchers import launcher_label, launcher_of_process
from probes.jobs.root import holds_gputop, resolve_root_safely
from probes.jobs.tracker import JobTracker
from probes.redact import redact_argv
from probes.sensors.nvml import NvmlGpuProbe, for_target
from probes.sensors.process_facts import is_python_command, process_cmdline, process_executable, process_name
from probes.sensors.proctree import ProcessTreeProbe, is_pid_namespace_init, node_processes, process_started_at
from probes.sensors.textfiles import read_text

JSON_SCHEMA = "gputop.jobs/1"
# Paths that only a process that imported torch has mapped: the C++ library and the extension module.
_TORCH_MAPS_MARKERS = ("/torch/lib/libtorch", "/torch/_C.")
LONE_PROCESS = "python"  # the launcher column of a training process that no launcher started
SORT_KEYS = ("cpu", "age", "command")
_WORKER_ROLES = (ROLE_DATALOADER_WORKER, ROLE_COMPILE_WORKER)


def imports_torch(pid: int) -> bool:
    """Whether the Python process `pid` has imported torch: its memory maps hold libtorch or torch._C. When
    the maps cannot be read (another user's process), its command line naming torch is the best hint left."""
    maps = read_text(f"/proc/{pid}/maps")
    if maps is not None:
        return any(marker in maps for marker in _TORCH_MAPS_MARKERS)
    return any("torch" in arg for arg in process_cmdline(pid))


@dataclass(frozen=True)
class JobSummary:
    """One training job, as a row of the picker and of `gputop --list`."""

    root_pid: int  # what `gputop --pid` attaches to: the launcher, or the training process itself
    launcher: str  # "torchrun", "mp.spawn", "bash" (a script that started it), ...; "python" for a lone process
    ranks: int  # training processes on this node (1 for a lone process)
    world_size: int | None  # as the ranks' environment states it
    workers: int  # DataLoader and compile workers
    processes: int  # every process of the job's tree
    gpus: tuple[int, ...]  # NVML indices of the GPUs its processes use; () when none is known
    cpu_pct: float | None  # percent of one core, the whole tree; None until a second scan
    started_at: float | None  # Unix time the root process started
    command: str  # the root's command line, secrets redacted
    found_by: str  # why it counts as a job: "torchrun launcher", "imports torch", ...

    @property
    def shown_command(self) -> str:
        """The command as the list shows it, the interpreter's folder left out: 'python train.py', not
        '/opt/venv/bin/python train.py' (and what "command" sorts by: what the user reads)."""
        program, _, rest = self.command.partition(" ")
        return " ".join(filter(None, (os.path.basename(program), rest)))

    def age_s(self, now: float) -> float | None:
        return None if self.started_at is None else max(0.0, now - self.started_at)

    def to_json(self, now: float) -> dict:
        document = asdict(self)
        document["gpus"] = list(self.gpus)
        age_s = self.age_s(now)
        document["age_s"] = None if age_s is None else round(age_s, 1)
        document["cpu_pct"] = None if self.cpu_pct is None else round(self.cpu_pct, 1)
        return document


@dataclass(frozen=True)
class CensusReading:
    """One scan: the jobs found, and what could not be read (NVML missing: no GPU column)."""

    jobs: tuple[JobSummary, ...]
    time: float  # Unix time of the scan
    gpu_note: str | None = None  # why GPUs are not shown, when they are not


class _Watched:
    """One job's tree across scans: the probe keeps CPU% deltas, the tracker its launcher and ranks."""

    def __init__(self, root_pid: int, found_by: str) -> None:
        self.tree = ProcessTreeProbe(root_pid, redact=redact_argv)
        self.tracker = JobTracker(root_pid)
        self.found_by = found_by
        self.started_at = process_started_at(root_pid)


class JobCensus:
    """Finds and describes this machine's training jobs; scan() again for fresh CPU% (it keeps each tree's
    previous reading). `read_gpu=False` leaves NVML alone; `gpu_probe` replaces it (tests)."""

    def __init__(self, *, read_gpu: bool = True, gpu_probe: NvmlGpuProbe | None = None) -> None:
        self._gpu = gpu_probe if gpu_probe is not None else (NvmlGpuProbe() if read_gpu else None)
        self._watched: dict[int, _Watched] = {}

    def scan(self) -> CensusReading:
        try:
            return self._scan()
        except Exception as exc:  # a bug in one reading never takes the picker down: say it, list nothing
            return CensusReading(jobs=(), time=time.time(), gpu_note=f"the census failed: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        if self._gpu is not None:
            self._gpu.close()

    def _scan(self) -> CensusReading:
        gpu = self._gpu.read() if self._gpu is not None else GpuReading(available=False, reason="not read (--no-gpu)")
        gpu_pids = {p.pid for device in gpu.devices for p in device.processes}
        found = find_training_jobs(gpu_pids, imports_torch=imports_torch)
        roots = {job.root_pid: job for job in found}
        for pid in list(self._watched):
            if pid not in roots:
                del self._watched[pid]
        for pid, job in roots.items():
            watched = self._watched.get(pid)
            if watched is None or watched.started_at != process_started_at(pid):  # new, or a reused PID
                self._watched[pid] = _Watched(pid, job.why)
        jobs = []
        for pid in sorted(self._watched):
            summary = self._describe(self._watched[pid], gpu)
            if summary is not None:
                jobs.append(summary)
        note = None if gpu.available or self._gpu is None else f"GPUs not shown: {gpu.reason}"  # --no-gpu: asked
        return CensusReading(jobs=tuple(jobs), time=time.time(), gpu_note=note)

    def _describe(self, watched: _Watched, gpu: GpuReading) -> JobSummary | None:
        target, samples = watched.tree.read()
        if not target.alive:
            return None
        info, samples = watched.tracker.update(samples, started=watched.tree.started_ticks())
        live = [s for s in samples if s.alive]
        if gpu.available:
            live = list(with_gpu_indices(live, for_target(gpu, watched.tree.pid_aliases())))
        cpu = [s.cpu_pct for s in live if s.cpu_pct is not None]
        root = next((s for s in live if s.pid == target.pid), None)
        if info is None:
            launcher, ranks, world = LONE_PROCESS, 1, None
        else:
            launcher = info.kind
            if info.kind == "launched" and root is not None:  # a script or tool started it: name that
                launcher = launcher_label(root.name, target.cmdline)
            ranks, world = len(info.rank_pids), info.world_size
        return JobSummary(
            root_pid=target.pid,
            launcher=launcher,
            ranks=ranks,
            world_size=world,
            workers=sum(1 for s in live if s.role in _WORKER_ROLES),
            processes=len(live),
            gpus=tuple(sorted({s.gpu_index for s in live if s.gpu_index is not None})),
            cpu_pct=sum(cpu) if cpu else None,
            started_at=watched.started_at,
            command=" ".join(target.cmdline) or (root.name if root is not None else "?"),
            found_by=watched.found_by,
        )


def list_jobs(census: JobCensus | None = None) -> CensusReading:
    """The jobs as one scan finds them, at once (`gputop --list`): no CPU% (None), which needs a second scan a
    window later; the picker's refreshes bring it, as htop's second screen does."""
    census = census if census is not None else JobCensus()
    try:
        return census.scan()
    finally:
        census.close()


# --- a PID that names no training job ------------------------------------------------------------------------


@dataclass(frozen=True)
class NotAJob:
    """`gputop --pid PID` named a process that is no training job: why, and the jobs the census found here."""

    pid: int
    name: str  # its process name (/proc/PID/comm)
    why: str  # "it is this system's init, and this gputop runs under it"
    reading: CensusReading  # this machine's jobs, as `gputop --list` finds them


def not_a_training_job(pid: int, make_census: Callable[[], JobCensus] = JobCensus) -> NotAJob | None:
    """None when `pid` may be watched as a job, as before: a Python process (a lone training process, a rank, a
    worker), a launcher's own process, one a launcher names a root for (a batch script: its Slurm step), a script
    or container init that started a job. A NotAJob for a process that is not Python and no launcher's whose tree
    holds this gputop, or for an init whose tree holds no training job or several (as the census finds them).
    The census (`make_census()`, NVML read as `gputop --list` reads it) is made and scanned only for those."""
    name, cmdline = process_name(pid), process_cmdline(pid)
    if is_python_command(cmdline, process_executable(pid)) or launcher_of_process(name, cmdline) is not None:
        return None
    if resolve_root_safely(pid).root_pid != pid:
        return None
    ours, init = holds_gputop(pid), is_pid_namespace_init(pid)
    if not (ours or init):
        return None
    census = make_census()
    try:
        reading = census.scan()
    finally:
        census.close()
    where = "this system's init" if pid == 1 else "a container's init (PID 1 inside it)" if init else ""
    if ours:
        why = f"it is {where}, and this gputop runs under it" if init else \
            "this gputop runs under it (the shell or terminal gputop was started from, or one above them)"
        return NotAJob(pid, name, why, reading)
    parent_of = {proc.pid: proc.ppid for proc in node_processes().values()}
    under = sum(1 for job in reading.jobs if _in_tree(job.root_pid, pid, parent_of))
    if under == 1:
        return None  # a container's init that started the job: its launcher, watched as before
    held = "no training job" if under == 0 else f"{under} training jobs"
    return NotAJob(pid, name, f"it is {where}, with {held} under it", reading)


def _in_tree(pid: int, top: int, parent_of: dict[int, int]) -> bool:
    """Whether `pid` is `top` or a descendant of it, by `parent_of` ({pid: parent pid})."""
    seen: set[int] = set()
    while pid not in seen:
        if pid == top:
            return True
        seen.add(pid)
        parent = parent_of.get(pid)
        if parent is None:
            return False
        pid = parent
    return False


# --- ordering and filtering, shared by the picker and --list ----------------------------------------------


def sort_jobs(jobs: Sequence[JobSummary], key: str = "cpu", now: float | None = None,
              reverse: bool = False) -> list[JobSummary]:
    """The jobs as htop orders processes: busiest first ("cpu"), youngest first ("age"), or by command
    ("command", A to Z). `reverse` turns the order round. Unknown values sort last."""
    now = time.time() if now is None else now
    orders: dict[str, Callable[[JobSummary], tuple]] = {
        "cpu": lambda job: (job.cpu_pct is None, -(job.cpu_pct or 0.0), job.root_pid),
        "age": lambda job: (job.started_at is None, -(job.started_at or 0.0), job.root_pid),
        "command": lambda job: (job.shown_command.lower(), job.root_pid),
    }
    ordered = sorted(jobs, key=orders[key])
    return ordered[::-1] if reverse else ordered


def job_matches(job: JobSummary, text: str) -> bool:
    """Whether a filter the user typed matches the job: case-insensitive, in its command, launcher or PID."""
    wanted = text.strip().lower()
    return not wanted or any(wanted in field.lower() for field in (job.command, job.launcher, str(job.root_pid)))
