"""The job a PID belongs to: a distributed job's launcher and ranks, or the training process a launcher started.

gputop may be pointed at any process of a job: torchrun's agent, one of its ranks, the parent of
``torch.multiprocessing.spawn`` children, or a non-Python launcher (``bash train.sh``, ``uv run``, a container's
init) with the Python training process under it. This module owns what a job is:

* reading each process's distributed environment (RANK, LOCAL_RANK, WORLD_SIZE, ... as torchrun's agent sets
  them) once per process (PID and start time), from /proc/PID/environ;
* deciding which process's tree is watched (:func:`resolve_root`: a rank's launcher when attached to a rank);
* laying the watched tree out each tick (:func:`find_layout`, a pure function): which processes are ranks
  (and their rank numbers), which one is the training process a launcher started (role ``main``), which are
  launchers, and which rank or main process each helper (DataLoader worker, compile worker) works for;
* which GPU each rank uses (:func:`gpu_index_for`, pure): its compute context in NVML first, else its
  CUDA_VISIBLE_DEVICES and LOCAL_RANK.

The /proc tree walk stays in probes/proctree.py; this module reads only single files of processes the walk
found (environ, stat, wchan) through probes/textfiles, and the engine applies the layout to the tree's samples
with :class:`JobTracker`. docs/jobs.md says what users see.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psutil

from probes.frame import (
    ROLE_COMPILE_WORKER,
    ROLE_DATALOADER_WORKER,
    ROLE_FORKSERVER,
    ROLE_LAUNCHER,
    ROLE_MAIN,
    ROLE_RANK,
    ROLE_RESOURCE_TRACKER,
    GpuReading,
    JobInfo,
    ProcessSample,
    StacksReading,
)
from probes.proctree import DATALOADER_WORKER_COMM, child_pids, parent_pid
from probes.textfiles import read_text

KIND_TORCHRUN = "torchrun"  # ranks started by torchrun's elastic agent (TORCHELASTIC_RUN_ID in their environment)
KIND_MP_SPAWN = "mp.spawn"  # children of torch.multiprocessing.spawn: no RANK, rank = start order
KIND_RANKS = "ranks"  # processes with RANK in their environment, started by something else (a script, srun)
KIND_LAUNCHED = "launched"  # one Python training process under a launcher (bash, uv run, a container init)

# Processes that work for a training process rather than being one (proctree tells them apart).
HELPER_ROLES = frozenset({ROLE_DATALOADER_WORKER, ROLE_COMPILE_WORKER, ROLE_FORKSERVER, ROLE_RESOURCE_TRACKER})
# multiprocessing's spawn start method runs every child as `python -c "from multiprocessing.spawn import
# spawn_main; spawn_main(...)" --multiprocessing-fork`; torch.multiprocessing.spawn uses it.
SPAWN_MAIN_MARKER = "from multiprocessing.spawn import spawn_main"
# torch.multiprocessing.spawn / start_processes: the parent's main thread waits in ProcessContext.join here.
MP_SPAWN_SOURCE = "torch/multiprocessing/spawn.py"
# torchrun names its agent's main thread (and so /proc/PID/comm) pt_elastic (torch/distributed/run.py).
TORCHRUN_AGENT_COMM = "pt_elastic"
_TORCHRUN_COMMANDS = re.compile(r"(^|[/\s])(torchrun|torch\.distributed\.(run|launch))(\s|$)|torch/distributed/run\.py")
_PYTHON_NAME = re.compile(r"^(python|pypy)[\d.]*$")
# A Python launcher waits for its child: in the kernel's wait4 (wchan do_wait), or in subprocess's wait or
# communicate loop (a pipe poll, visible only in its stack).
_WAITING_WCHAN = "do_wait"
_SUBPROCESS_SOURCES = ("/subprocess.py", "/asyncio/subprocess.py")
NOTE_COMMAND_CHARS = 60


# --- the distributed environment --------------------------------------------------------------------------


@dataclass(frozen=True)
class DistEnv:
    """The distributed-training variables of one process's environment (None where unset or not a number)."""

    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    group_rank: int | None = None
    restart_count: int | None = None  # TORCHELASTIC_RESTART_COUNT
    run_id: str | None = None  # TORCHELASTIC_RUN_ID
    master_addr: str | None = None
    master_port: int | None = None
    cuda_visible_devices: str | None = None

    @property
    def torchelastic(self) -> bool:
        return self.run_id is not None or self.restart_count is not None


NO_ENV = DistEnv()


def parse_environ(block: str | None) -> dict[str, str]:
    """{name: value} from the NUL-separated text of /proc/PID/environ ({} for None or an empty file)."""
    environ = {}
    for entry in (block or "").split("\0"):
        name, sep, value = entry.partition("=")
        if sep and name:
            environ[name] = value
    return environ


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    value = value.strip()
    try:
        return int(value)
    except ValueError:
        return None


def parse_dist_env(environ: Mapping[str, str]) -> DistEnv:
    """The distributed variables of an environment; a malformed number reads as unset."""
    run_id = environ.get("TORCHELASTIC_RUN_ID") or None
    return DistEnv(
        rank=_int(environ.get("RANK")),
        local_rank=_int(environ.get("LOCAL_RANK")),
        world_size=_int(environ.get("WORLD_SIZE")),
        local_world_size=_int(environ.get("LOCAL_WORLD_SIZE")),
        group_rank=_int(environ.get("GROUP_RANK")),
        restart_count=_int(environ.get("TORCHELASTIC_RESTART_COUNT")),
        run_id=run_id,
        master_addr=environ.get("MASTER_ADDR") or None,
        master_port=_int(environ.get("MASTER_PORT")),
        cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
    )


def read_dist_env(pid: int) -> DistEnv:
    """The process's distributed variables as it was started (/proc/PID/environ); NO_ENV when unreadable.

    environ is the environment the process was exec'd with: torchrun's agent sets the ranks' variables there,
    and a DataLoader worker forked from a rank carries a copy of its rank's.
    """
    return parse_dist_env(parse_environ(read_text(f"/proc/{pid}/environ")))


def start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (/proc/PID/stat field 22): with the PID, it names
    one process (a PID can be reused), and it orders siblings by start."""
    stat = read_text(f"/proc/{pid}/stat")
    if not stat:
        return None
    fields = stat.rpartition(")")[2].split()  # comm, before ")", may hold spaces
    return _int(fields[19]) if len(fields) > 19 else None


def is_python_command(cmdline: Sequence[str], exe: str | None = None) -> bool:
    """Whether a command line (or the executable) is a Python interpreter's: python3.11, pypy3, ..."""
    names = [os.path.basename(cmdline[0])] if cmdline else []
    if exe:
        names.append(os.path.basename(exe))
    return any(_PYTHON_NAME.match(name) for name in names)


def is_torchrun(name: str, cmdline: Sequence[str]) -> bool:
    """torchrun's elastic agent (also `python -m torch.distributed.run` and the older torch.distributed.launch)."""
    return name == TORCHRUN_AGENT_COMM or bool(_TORCHRUN_COMMANDS.search(" ".join(cmdline)))


def is_spawn_child(cmdline: Sequence[str]) -> bool:
    return SPAWN_MAIN_MARKER in " ".join(cmdline)


def short_command(cmdline: Sequence[str]) -> str:
    """'python train.py --lr 3e-4' from ['/usr/bin/python3.11', 'train.py', ...]: the program's base name and
    its arguments, cut to fit a line."""
    if not cmdline:
        return "?"
    text = " ".join([os.path.basename(cmdline[0]), *cmdline[1:]])
    return text if len(text) <= NOTE_COMMAND_CHARS else text[: NOTE_COMMAND_CHARS - 3] + "..."


# --- the layout: a pure function of the tree ------------------------------------------------------------


@dataclass(frozen=True)
class ProcessFacts:
    """What the layout decision needs about one process of the watched tree."""

    pid: int
    ppid: int | None
    role: str  # proctree's role: tells helpers (DataLoader workers, compile workers, ...) apart
    name: str = ""
    cmdline: tuple[str, ...] = ()
    alive: bool = True
    started: int = 0  # start time (clock ticks since boot): orders siblings
    python: bool = False
    env: DistEnv = NO_ENV
    spawn_child: bool = False  # runs multiprocessing's spawn_main (read while it lived: a zombie has no cmdline)
    waiting_for_child: bool = False  # its main thread waits for a child process to end
    cpu_seconds: float | None = None


@dataclass(frozen=True)
class JobLayout:
    """How the watched tree is one job: who the ranks (or the one main process) and the launchers are."""

    kind: str
    launcher_pid: int | None  # the process that started the ranks (their common parent), or the root
    launchers: tuple[int, ...]  # every process between the root and the training processes, root included
    ranks: tuple[tuple[int, int], ...] = ()  # (pid, rank), zombies included, by rank then start
    main_pid: int | None = None  # kind "launched": the training process
    other_candidates: int = 0  # kind "launched": further Python processes that could have been the main one
    run_id: str | None = None
    world_size: int | None = None
    local_world_size: int | None = None


def _children(facts: Sequence[ProcessFacts]) -> dict[int, list[ProcessFacts]]:
    pids = {f.pid for f in facts}
    children: dict[int, list[ProcessFacts]] = defaultdict(list)
    for f in facts:
        if f.ppid in pids and f.ppid != f.pid:
            children[f.ppid].append(f)
    for kids in children.values():
        kids.sort(key=lambda f: (f.started, f.pid))
    return children


def _ancestors(pid: int, by_pid: Mapping[int, ProcessFacts], root_pid: int) -> list[int]:
    """Strict ancestors of `pid` inside the tree, nearest first, up to and including the root."""
    chain: list[int] = []
    current = by_pid.get(pid)
    while current is not None and current.pid != root_pid and current.ppid in by_pid and current.ppid not in chain:
        chain.append(current.ppid)
        current = by_pid[current.ppid]
    return chain


def _rank_heads(facts: Sequence[ProcessFacts], by_pid: Mapping[int, ProcessFacts]) -> list[ProcessFacts]:
    """Processes with RANK in their environment that are not helpers of another such process (a DataLoader
    worker forked from a rank inherits its environment unchanged), nor the launcher of others (a shell that
    exported RANK before starting torchrun, which gives each rank its own)."""
    heads = []
    for f in facts:
        if f.env.rank is None or f.role in HELPER_ROLES:
            continue
        parent = by_pid.get(f.ppid) if f.ppid is not None else None
        if parent is not None and parent.env == f.env:
            continue
        heads.append(f)
    head_pids = {h.pid for h in heads}
    launching = {a for h in heads for a in _ancestors(h.pid, by_pid, -1) if a in head_pids}
    return [h for h in heads if h.pid not in launching]


def _is_job(heads: Sequence[ProcessFacts]) -> bool:
    """Ranks, not a lone script that happens to set RANK=0: several of them, torchrun's, or a world above one."""
    return len(heads) >= 2 or any(h.env.torchelastic or (h.env.world_size or 0) > 1 for h in heads)


def _common_parent(heads: Sequence[ProcessFacts], by_pid: Mapping[int, ProcessFacts]) -> int | None:
    parents = {h.ppid for h in heads}
    if len(parents) == 1:
        (parent,) = parents
        return parent if parent in by_pid else None
    return None


def _launchers_of(training: Sequence[int], by_pid: Mapping[int, ProcessFacts], root_pid: int) -> tuple[int, ...]:
    found: dict[int, None] = {}
    for pid in training:
        for ancestor in _ancestors(pid, by_pid, root_pid):
            found[ancestor] = None
    return tuple(found)


def _first_alive(values: Sequence[ProcessFacts], field: str):
    """A field of the live processes first (after a restart the zombies of the old ranks carry stale values)."""
    for f in sorted(values, key=lambda f: (not f.alive, -f.started)):
        value = getattr(f.env, field)
        if value is not None:
            return value
    return None


def _ranks_layout(heads: list[ProcessFacts], by_pid: Mapping[int, ProcessFacts], root_pid: int) -> JobLayout:
    launcher = _common_parent(heads, by_pid)
    launcher_facts = by_pid.get(launcher) if launcher is not None else None
    torchrun = any(h.env.torchelastic for h in heads) or (
        launcher_facts is not None and is_torchrun(launcher_facts.name, launcher_facts.cmdline))
    ordered = sorted(heads, key=lambda h: (h.env.rank, h.started, h.pid))
    pids = [h.pid for h in ordered]
    return JobLayout(
        kind=KIND_TORCHRUN if torchrun else KIND_RANKS,
        launcher_pid=launcher if launcher is not None else (root_pid if root_pid not in pids else None),
        launchers=_launchers_of(pids, by_pid, root_pid),
        ranks=tuple((h.pid, h.env.rank) for h in ordered),
        run_id=_first_alive(heads, "run_id"),
        world_size=_first_alive(heads, "world_size"),
        local_world_size=_first_alive(heads, "local_world_size") or len({h.env.rank for h in heads if h.alive}) or None,
    )


def _spawn_ranks(parent: ProcessFacts, kids: Sequence[ProcessFacts],
                 spawn_evidence: Mapping[int, bool]) -> list[ProcessFacts]:
    """The children of `parent` that are torch.multiprocessing.spawn's ranks (empty when there are none)."""
    if not parent.python or parent.env.rank is not None:
        return []
    if spawn_evidence.get(parent.pid) is False:  # its stack is known and is not in torch's spawn
        return []
    spawned = [k for k in kids if k.spawn_child and k.role not in HELPER_ROLES]
    if not spawned:
        return []
    # Until the parent's stack is known: spawn-context DataLoader workers also run spawn_main before they
    # name themselves pt_data_worker; a sibling that already did says these are workers too.
    if parent.pid not in spawn_evidence and any(k.role == ROLE_DATALOADER_WORKER for k in kids):
        return []
    return spawned


def _assign_spawn_ranks(spawned: Sequence[ProcessFacts], known: Mapping[int, int]) -> list[tuple[int, int]]:
    """Rank = start order; a process keeps the rank it was given, newcomers take the lowest free numbers."""
    taken = {known[f.pid] for f in spawned if f.pid in known}
    assigned = []
    free = (n for n in range(len(spawned) + len(taken) + 1) if n not in taken)
    for f in spawned:  # already in start order
        assigned.append((f.pid, known[f.pid] if f.pid in known else next(free)))
    return sorted(assigned, key=lambda pair: pair[1])


def _launched_candidates(f: ProcessFacts, children: Mapping[int, list[ProcessFacts]], root: bool) -> list[ProcessFacts]:
    """The topmost Python training processes at or under `f`: a non-Python process and a Python one waiting for
    its child are passed through; a Python one waiting with no Python process under it is one itself."""
    launcher_like = not f.python or f.waiting_for_child
    if not launcher_like and not root:
        return [f] if f.role not in HELPER_ROLES else []
    found = []
    for child in children.get(f.pid, ()):
        if child.role in HELPER_ROLES:
            continue
        found.extend(_launched_candidates(child, children, root=False))
    if not found and f.python and not root:
        return [f]
    return found


def find_layout(
    root_pid: int,
    facts: Sequence[ProcessFacts],
    spawn_evidence: Mapping[int, bool] | None = None,
    known_spawn_ranks: Mapping[int, int] | None = None,
    previous_main: int | None = None,
) -> JobLayout | None:
    """How the tree rooted at `root_pid` is a job, or None when it is one process (and its helpers) alone.

    In order: ranks carrying RANK (torchrun, or any launcher); torch.multiprocessing.spawn's children of a
    Python process; the Python training process under a launcher (a non-Python root, or a Python root waiting
    for its child). spawn_evidence: {pid: whether its sampled stack is in torch's spawn} for processes whose
    stack is known; known_spawn_ranks and previous_main keep earlier choices while those processes live.
    """
    spawn_evidence = spawn_evidence or {}
    by_pid = {f.pid: f for f in facts}
    root = by_pid.get(root_pid)
    if root is None:
        return None
    heads = _rank_heads(facts, by_pid)
    if heads and _is_job(heads):
        return _ranks_layout(heads, by_pid, root_pid)

    children = _children(facts)
    queue = [root]
    while queue:
        parent = queue.pop(0)
        spawned = _spawn_ranks(parent, children.get(parent.pid, ()), spawn_evidence)
        if spawned:
            ranks = _assign_spawn_ranks(spawned, known_spawn_ranks or {})
            pids = [pid for pid, _ in ranks]
            return JobLayout(
                kind=KIND_MP_SPAWN,
                launcher_pid=parent.pid,
                launchers=_launchers_of(pids, by_pid, root_pid),
                ranks=tuple(ranks),
                world_size=len(spawned),
                local_world_size=len(spawned),
            )
        queue.extend(k for k in children.get(parent.pid, ()) if k.role not in HELPER_ROLES)

    if root.python and not root.waiting_for_child:
        return None
    candidates = _launched_candidates(root, children, root=True)
    if not candidates:
        return None
    main = _choose_main(candidates, previous_main)
    return JobLayout(
        kind=KIND_LAUNCHED,
        launcher_pid=root_pid,
        launchers=_launchers_of([main.pid], by_pid, root_pid),
        main_pid=main.pid,
        other_candidates=len([c for c in candidates if c.alive]) - (1 if main.alive else 0),
    )


def _choose_main(candidates: Sequence[ProcessFacts], previous_main: int | None) -> ProcessFacts:
    """The one kept from before while it lives; else the live one that has used the most CPU (the earliest
    started on a tie); a finished one only when none lives."""
    for c in candidates:
        if c.pid == previous_main and c.alive:
            return c
    alive = [c for c in candidates if c.alive] or list(candidates)
    return min(alive, key=lambda c: (-(c.cpu_seconds or 0.0), c.started, c.pid))


# --- evidence from stacks --------------------------------------------------------------------------------


def stack_evidence(stacks: StacksReading | None) -> tuple[dict[int, bool], set[int]]:
    """({pid: some thread is in torch's spawn}, {pids whose main thread waits in subprocess}) from the latest
    stacks the sampler holds: the first says a Python parent of spawn_main children is mp.spawn's launcher (or,
    False, that it is not: spawn-context DataLoader workers look the same at their start)."""
    spawn: dict[int, bool] = {}
    waiting: set[int] = set()
    if stacks is None:
        return spawn, waiting
    for thread in stacks.threads:
        in_spawn = any(frame.file.endswith(MP_SPAWN_SOURCE) for frame in thread.frames)
        spawn[thread.pid] = spawn.get(thread.pid, False) or in_spawn
        main_thread = thread.name == "MainThread" or (thread.name is None and thread.tid == thread.pid)
        if main_thread and any(frame.file.endswith(_SUBPROCESS_SOURCES) for frame in thread.frames):
            waiting.add(thread.pid)
    return spawn, waiting


# --- which GPU a rank uses -------------------------------------------------------------------------------


def nvml_gpu_index(pid: int, gpu: GpuReading) -> int | None:
    """The GPU on which NVML lists `pid` (mapped to our PID namespace) as a compute process; where it holds
    contexts on several (a stray one on GPU 0 is common), the one where it uses the most memory."""
    best: tuple[int, int] | None = None  # (memory, -index)
    for device in gpu.devices:
        for process in device.processes:
            if process.local_pid != pid:
                continue
            key = (process.used_memory_bytes or 0, -device.index)
            if best is None or key > best:
                best = key
    return -best[1] if best is not None else None


def _device_for_entry(entry: str, gpu: GpuReading) -> int | None:
    """An entry of CUDA_VISIBLE_DEVICES (an index, or a GPU UUID or unique UUID prefix) as an NVML index."""
    devices = gpu.devices if gpu.available else ()
    if entry.lstrip("-").isdigit():
        index = int(entry)
        if index < 0:
            return None
        if not devices:  # NVML unreadable: the user's own setting is still the best answer
            return index
        return index if any(d.index == index for d in devices) else None
    if entry.upper().startswith("GPU-"):
        matches = [d.index for d in devices if d.uuid and d.uuid.lower().startswith(entry.lower())]
        return matches[0] if len(matches) == 1 else None
    return None  # MIG-... instances and anything else: no single NVML device index


def environment_gpu_index(cuda_visible_devices: str | None, local_rank: int | None, gpu: GpuReading) -> int | None:
    """The GPU a rank's environment points it at: entry LOCAL_RANK of CUDA_VISIBLE_DEVICES, or its only entry
    (launchers that give each rank one device set LOCAL_RANK=0 or leave it); without the variable, device
    LOCAL_RANK when NVML shows it. CUDA numbers devices fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID,
    NVML by PCI bus: on a node of identical GPUs the two agree."""
    if cuda_visible_devices is None:
        if local_rank is None or not gpu.available:
            return None
        return local_rank if any(d.index == local_rank for d in gpu.devices) else None
    entries = [e.strip() for e in cuda_visible_devices.split(",") if e.strip()]
    if not entries:
        return None  # "" hides every GPU
    if len(entries) == 1:
        return _device_for_entry(entries[0], gpu)
    position = local_rank or 0
    return _device_for_entry(entries[position], gpu) if position < len(entries) else None


def gpu_index_for(sample: ProcessSample, gpu: GpuReading) -> int | None:
    """The GPU a process uses: its NVML compute context; else, for a rank, its environment (CUDA_VISIBLE_DEVICES
    and LOCAL_RANK); for a launched main process, an explicit CUDA_VISIBLE_DEVICES only."""
    found = nvml_gpu_index(sample.pid, gpu)
    if found is not None:
        return found
    if sample.role == ROLE_RANK:
        return environment_gpu_index(sample.cuda_visible_devices, sample.local_rank, gpu)
    if sample.role == ROLE_MAIN and sample.cuda_visible_devices is not None:
        return environment_gpu_index(sample.cuda_visible_devices, None, gpu)
    return None


def with_gpu_indices(processes: Sequence[ProcessSample], gpu: GpuReading) -> tuple[ProcessSample, ...]:
    """The samples with gpu_index filled wherever one is known."""
    updated = []
    for sample in processes:
        index = gpu_index_for(sample, gpu)
        updated.append(sample if index == sample.gpu_index else dataclasses.replace(sample, gpu_index=index))
    return tuple(updated)


def apply_layout(layout: JobLayout, processes: Sequence[ProcessSample],
                 by_pid: Mapping[int, ProcessFacts]) -> tuple[ProcessSample, ...]:
    """The samples with the layout's roles, each rank's fields from its environment, and each helper's
    owner_pid: the rank or main process it works for (its nearest such ancestor)."""
    ranks = dict(layout.ranks)
    training = set(ranks) | ({layout.main_pid} if layout.main_pid is not None else set())
    launchers = set(layout.launchers)
    updated = []
    for sample in processes:
        facts = by_pid[sample.pid]
        if sample.pid in ranks:
            env = facts.env
            sample = dataclasses.replace(
                sample, role=ROLE_RANK, rank=ranks[sample.pid],
                # mp.spawn's children carry no LOCAL_RANK: on their one node, the local rank is the rank.
                local_rank=env.local_rank if env.local_rank is not None or layout.kind != KIND_MP_SPAWN
                else ranks[sample.pid],
                world_size=env.world_size if env.world_size is not None else layout.world_size,
                restart_count=env.restart_count, cuda_visible_devices=env.cuda_visible_devices,
                owner_pid=None)
        elif sample.pid == layout.main_pid:
            sample = dataclasses.replace(sample, role=ROLE_MAIN, owner_pid=None,
                                         cuda_visible_devices=facts.env.cuda_visible_devices)
        elif sample.pid in launchers:
            sample = dataclasses.replace(sample, role=ROLE_LAUNCHER, owner_pid=None)
        else:
            if sample.role == ROLE_MAIN:  # proctree calls the root main; here it is not the training process
                sample = dataclasses.replace(sample, role=ROLE_LAUNCHER)
            owner = next((a for a in _ancestors(sample.pid, by_pid, -1) if a in training), None)
            if owner is not None:
                sample = dataclasses.replace(sample, owner_pid=owner)
        updated.append(sample)
    return tuple(updated)


# --- the root: which tree to watch ------------------------------------------------------------------------


@dataclass(frozen=True)
class RootChoice:
    root_pid: int
    attached_rank: int | None = None  # the attached process's rank, when it is a rank and the root its launcher


def _our_ancestors() -> set[int]:
    """gputop and its ancestors: a tree that holds gputop is never watched as a job (py-spy would sample us)."""
    found = set()
    pid: int | None = os.getpid()
    while pid and pid not in found:
        found.add(pid)
        pid = parent_pid(pid)
    return found


def _process_name(pid: int) -> str:
    return (read_text(f"/proc/{pid}/comm") or "").rstrip("\n")


def _cmdline(pid: int) -> tuple[str, ...]:
    try:
        return tuple(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ()


def resolve_root(attached_pid: int) -> RootChoice:
    """The process whose tree is watched when the user names `attached_pid`: the launcher of a rank (torchrun's
    agent, mp.spawn's parent, a script that started two or more ranks), else the attached process itself."""
    parent = parent_pid(attached_pid)
    if parent is None or parent <= 1 or parent in _our_ancestors():
        return RootChoice(attached_pid)
    env = read_dist_env(attached_pid)
    parent_env = read_dist_env(parent)
    if env.rank is not None:
        if parent_env.rank is not None:
            return RootChoice(attached_pid)  # a helper of a rank (a DataLoader worker): watched as asked
        ranked_siblings = [c for c in child_pids(parent) if read_dist_env(c).rank is not None]
        if is_torchrun(_process_name(parent), _cmdline(parent)) or len(ranked_siblings) >= 2:
            return RootChoice(parent, attached_rank=env.rank)
        return RootChoice(attached_pid)
    cmdline = _cmdline(attached_pid)
    if (is_spawn_child(cmdline) and _process_name(attached_pid) != DATALOADER_WORKER_COMM
            and is_python_command(_cmdline(parent), _exe(parent)) and parent_env.rank is None):
        return RootChoice(parent)
    return RootChoice(attached_pid)


def resolve_root_safely(attached_pid: int) -> RootChoice:
    """resolve_root, but never raising: a process that cannot be read is watched as named."""
    try:
        return resolve_root(attached_pid)
    except Exception:
        return RootChoice(attached_pid)


def _exe(pid: int) -> str | None:
    try:
        return psutil.Process(pid).exe() or None
    except (psutil.Error, OSError):
        return None


# --- the tracker: the layout applied to each tick's samples ----------------------------------------------


@dataclass(frozen=True)
class _Static:
    """What is read once per process (PID and start time): its environment and what its command line says."""

    cmdline: tuple[str, ...]
    env: DistEnv
    python: bool
    spawn_child: bool


class JobTracker:
    """Follows the job found from `attached_pid` across ticks: update() lays out each tick's tree.

    root_pid is the process whose tree the engine should watch (decided once, at construction).
    """

    def __init__(self, attached_pid: int) -> None:
        self.attached_pid = attached_pid
        choice = resolve_root_safely(attached_pid)
        self.root_pid = choice.root_pid
        self._attached_rank = choice.attached_rank
        self._static: dict[tuple[int, int | None], _Static] = {}
        self._spawn_ranks: dict[int, int] = {}  # pid -> rank given, for mp.spawn children
        self._main: int | None = None
        self._last_layout: JobLayout | None = None
        self._launchers: tuple[int, ...] = ()
        self._not_python: set[int] = set()
        self._last_info: JobInfo | None = None
        self._last_samples: tuple[ProcessSample, ...] = ()

    def unsampled_pids(self) -> set[int]:
        """Launchers that are not Python (bash, uv, srun): py-spy cannot read them, so the sampler skips them."""
        return {pid for pid in self._launchers if pid in self._not_python}

    def update(self, processes: Sequence[ProcessSample],
               stacks: StacksReading | None = None) -> tuple[JobInfo | None, tuple[ProcessSample, ...]]:
        """This tick's JobInfo (None for a lone process) and the samples with roles, ranks and owners set."""
        try:
            return self._update(processes, stacks)
        except Exception:  # a probe never raises: a layout bug leaves the tree as proctree read it
            return None, tuple(processes)

    def _update(self, processes: Sequence[ProcessSample],
                stacks: StacksReading | None) -> tuple[JobInfo | None, tuple[ProcessSample, ...]]:
        if self._last_info is not None and processes and not any(p.alive for p in processes):
            # The root has ended (proctree returns its last samples marked ended): the job as last seen, ended.
            ended = tuple(dataclasses.replace(s, alive=False) for s in self._last_samples)
            return dataclasses.replace(self._last_info, rank_pids=(), selected_pid=None), ended
        spawn_evidence, waiting_in_stack = stack_evidence(stacks)
        facts = [self._facts(p, waiting_in_stack) for p in processes]
        self._not_python = {f.pid for f in facts if not f.python}
        present = {p.pid for p in processes}
        self._static = {key: value for key, value in self._static.items() if key[0] in present}
        layout = find_layout(self.root_pid, facts, spawn_evidence, self._spawn_ranks, self._main)
        root = next((f for f in facts if f.pid == self.root_pid), None)
        last = self._last_layout
        if layout is None and last is not None and root is not None and (
                last.kind != KIND_LAUNCHED or not root.python or root.waiting_for_child):
            # Between a rank's exit and its restart, or the script's next program: still the same job. (A Python
            # process that ran a Python child for a while and now trains again is a lone process again.)
            launchers = tuple(pid for pid in last.launchers if pid in present) or (self.root_pid,)
            layout = dataclasses.replace(last, ranks=(), main_pid=None, launchers=launchers, other_candidates=0)
        if layout is None:
            self._launchers, self._last_layout, self._main, self._last_info = (), None, None, None
            return None, tuple(processes)
        self._last_layout = layout
        self._launchers = layout.launchers
        if layout.kind == KIND_MP_SPAWN:
            self._spawn_ranks = dict(layout.ranks)
        self._main = layout.main_pid
        by_pid = {f.pid: f for f in facts}
        samples = apply_layout(layout, processes, by_pid)
        self._last_info, self._last_samples = self._job_info(layout, samples, by_pid), samples
        return self._last_info, samples

    def _facts(self, sample: ProcessSample, waiting_in_stack: set[int]) -> ProcessFacts:
        started = start_ticks(sample.pid)
        key = (sample.pid, started)
        static = self._static.get(key)
        if static is None or (sample.cmdline and sample.cmdline != static.cmdline):  # new, or it exec'd
            if sample.alive or static is None:
                cmdline = sample.cmdline
                static = _Static(
                    cmdline=cmdline,
                    env=read_dist_env(sample.pid) if sample.alive else NO_ENV,
                    python=is_python_command(cmdline) or (sample.alive and is_python_command((), _exe(sample.pid))),
                    spawn_child=is_spawn_child(cmdline),
                )
                self._static[key] = static
        waiting = sample.pid in waiting_in_stack
        if static.python and sample.alive and not waiting:
            waiting = (read_text(f"/proc/{sample.pid}/wchan") or "").strip() == _WAITING_WCHAN
        return ProcessFacts(
            pid=sample.pid, ppid=sample.ppid, role=sample.role, name=sample.name, cmdline=static.cmdline,
            alive=sample.alive, started=started or 0, python=static.python, env=static.env,
            spawn_child=static.spawn_child, waiting_for_child=waiting, cpu_seconds=sample.cpu_seconds,
        )

    def _job_info(self, layout: JobLayout, samples: Sequence[ProcessSample],
                  by_pid: Mapping[int, ProcessFacts]) -> JobInfo:
        live = {s.pid for s in samples if s.alive}
        if layout.kind == KIND_LAUNCHED:
            rank_pids = tuple(pid for pid in [layout.main_pid] if pid in live)
        else:
            rank_pids = tuple(pid for pid, _ in layout.ranks if pid in live)
        selected = None
        ranks = dict(layout.ranks)
        if self.attached_pid in ranks and self.attached_pid in live:
            selected = self.attached_pid
        elif self._attached_rank is not None:  # the rank the user named was restarted: follow its number
            selected = next((pid for pid in rank_pids if ranks.get(pid) == self._attached_rank), None)
        return JobInfo(
            kind=layout.kind,
            attached_pid=self.attached_pid,
            root_pid=self.root_pid,
            launcher_pid=layout.launcher_pid,
            run_id=layout.run_id,
            world_size=layout.world_size,
            local_world_size=layout.local_world_size,
            rank_pids=rank_pids,
            selected_pid=selected,
            note=self._note(layout, by_pid, len(rank_pids)),
        )

    def _note(self, layout: JobLayout, by_pid: Mapping[int, ProcessFacts], live_ranks: int) -> str | None:
        root = by_pid.get(self.root_pid)
        root_name = root.name if root is not None and root.name else "PID"
        if root is not None and is_torchrun(root.name, root.cmdline):
            root_name = "torchrun"  # its agent's comm is pt_elastic, which says little to a reader
        if layout.kind == KIND_LAUNCHED:
            main = by_pid.get(layout.main_pid) if layout.main_pid is not None else None
            if main is None:
                return f"attached to {root_name} (PID {self.root_pid}): waiting for its Python training process"
            others = (f" (and {layout.other_candidates} other Python process"
                      f"{'es' if layout.other_candidates != 1 else ''})") if layout.other_candidates else ""
            return (f"attached to {root_name} (PID {self.root_pid}): watching {short_command(main.cmdline)} "
                    f"(PID {main.pid}) under it{others}")
        what = f"{layout.kind} job, {live_ranks} rank{'s' if live_ranks != 1 else ''} on this node"
        if self.attached_pid != self.root_pid:
            attached = by_pid.get(self.attached_pid)
            rank = dict(layout.ranks).get(self.attached_pid, self._attached_rank)
            named = f"rank {rank}" if rank is not None else (attached.name if attached else "PID")
            return (f"attached to {named} (PID {self.attached_pid}): watching the {what} under PID {self.root_pid}; "
                    f"--process-only watches PID {self.attached_pid} alone")
        if self.root_pid in dict(layout.ranks):
            rank = dict(layout.ranks)[self.root_pid]
            return f"PID {self.root_pid} is rank {rank} of a job whose launcher is not visible from here"
        return f"attached to {root_name} (PID {self.root_pid}): watching the {what}"
