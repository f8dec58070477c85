"""What launchers decide from, and what they decide: the vocabulary shared by every module of probes/jobs/.

* :class:`ProcessFacts`: one process of the watched tree, as a layout decision needs it;
* :class:`WatchedTree`: the whole watched tree with its lookups (children, ancestors) and the evidence and
  earlier choices a decision may keep, plus what every launcher that starts ranks with variables shares (the
  processes whose environment names a rank, and their layout);
* :class:`JobLayout`: a launcher's answer for the watched tree; :class:`RootChoice`: its answer for the process
  the user named (:class:`Attachment`); :class:`NoteContext`: what a job's note is worded from.

The types live here rather than beside the walks over LAUNCHERS (layout.py, root.py) because the launchers
need them and those walks need the launchers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from probes.frame import (
    ROLE_COMPILE_WORKER,
    ROLE_DATALOADER_WORKER,
    ROLE_FORKSERVER,
    ROLE_RESOURCE_TRACKER,
    JobKind,
)
from probes.sensors.process_facts import NO_ENV, DistEnv
from probes.sensors.proctree import ancestors

# Processes that work for a training process rather than being one (proctree tells them apart).
HELPER_ROLES = frozenset({ROLE_DATALOADER_WORKER, ROLE_COMPILE_WORKER, ROLE_FORKSERVER, ROLE_RESOURCE_TRACKER})


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
    # Its main thread waits on a child process: for it to end (wait4, subprocess's wait loop), or relaying its output.
    waiting_for_child: bool = False
    launcher_process: bool = False  # a known launcher's own process by its command line (`accelerate launch`)
    cpu_seconds: float | None = None


    @property
    def launches(self) -> bool:
        """Whether it stands between the user and a training process rather than training itself: not Python (a
        shell, uv, srun), a Python process waiting on its child, or a known launcher's own process."""
        return not self.python or self.waiting_for_child or self.launcher_process


@dataclass(frozen=True)
class JobLayout:
    """How the watched tree is one job: who the ranks (or the one main process) and the launchers are."""

    kind: JobKind
    launcher_pid: int | None  # the process that started the ranks (their common parent), or the root
    launchers: tuple[int, ...]  # every process between the root and the training processes, root included
    ranks: tuple[tuple[int, int], ...] = ()  # (pid, rank), zombies included, by rank then start
    main_pid: int | None = None  # kind "launched": the training process
    other_candidates: int = 0  # kind "launched": further Python processes that could have been the main one
    run_id: str | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    slurm_step: str | None = None  # the Slurm job step of the ranks, JOBID.STEP
    training_elsewhere: bool = False  # the tree is a client of a job whose training processes are not in it

    @property
    def training_pids(self) -> tuple[int, ...]:
        """The ranks by rank, or the one main process."""
        return tuple(pid for pid, _ in self.ranks) + ((self.main_pid,) if self.main_pid is not None else ())


class WatchedTree:
    """The watched tree, for the launchers to find their job in.

    spawn_evidence: {pid: whether a thread of it is in torch's spawn} for processes whose stack is known;
    known_spawn_ranks and previous_main: the last tick's choices, kept while those processes live.
    """

    def __init__(self, root_pid: int, processes: Sequence[ProcessFacts],
                 spawn_evidence: Mapping[int, bool] | None = None,
                 known_spawn_ranks: Mapping[int, int] | None = None, previous_main: int | None = None) -> None:
        self.root_pid = root_pid
        self.processes = tuple(processes)
        self.spawn_evidence = spawn_evidence or {}
        self.known_spawn_ranks = known_spawn_ranks or {}
        self.previous_main = previous_main
        self.by_pid = {f.pid: f for f in self.processes}
        self.root = self.by_pid.get(root_pid)
        self._parent_of = {f.pid: f.ppid for f in self.processes}

    @cached_property
    def children(self) -> dict[int, list[ProcessFacts]]:
        """{pid: its children in the tree, by start}."""
        children: dict[int, list[ProcessFacts]] = defaultdict(list)
        for f in self.processes:
            if f.ppid in self.by_pid and f.ppid != f.pid:
                children[f.ppid].append(f)
        for kids in children.values():
            kids.sort(key=lambda f: (f.started, f.pid))
        return children

    def ancestors(self, pid: int, *, within_root: bool = True) -> list[int]:
        """Strict ancestors of `pid` in the tree, nearest first: up to the root, or as far as the tree goes."""
        return ancestors(pid, self._parent_of, self.root_pid if within_root else None)

    def launchers_of(self, training: Sequence[int]) -> tuple[int, ...]:
        """Every process between the root and these training processes, root included."""
        found: dict[int, None] = {}
        for pid in training:
            for ancestor in self.ancestors(pid):
                found[ancestor] = None
        return tuple(found)

    @cached_property
    def rank_heads(self) -> list[ProcessFacts]:
        """Processes with a rank in their environment that are not helpers of another such process (a
        DataLoader worker forked from a rank inherits its environment unchanged), nor the launcher of others (a
        shell that exported RANK before starting torchrun, which gives each rank its own)."""
        heads = []
        for f in self.processes:
            if f.env.rank is None or f.role in HELPER_ROLES:
                continue
            parent = self.by_pid.get(f.ppid) if f.ppid is not None else None
            if parent is not None and parent.env == f.env:
                continue
            heads.append(f)
        head_pids = {h.pid for h in heads}
        launching = {a for h in heads for a in self.ancestors(h.pid, within_root=False) if a in head_pids}
        return [h for h in heads if h.pid not in launching]

    def common_parent(self, processes: Sequence[ProcessFacts]) -> ProcessFacts | None:
        parents = {f.ppid for f in processes}
        if len(parents) == 1:
            (parent,) = parents
            return self.by_pid.get(parent) if parent is not None else None
        return None

    def ranks_layout(self, kind: JobKind, heads: Sequence[ProcessFacts]) -> JobLayout:
        """The job of these ranks (processes whose environment names their rank), by rank then start."""
        launcher = self.common_parent(heads)
        ordered = sorted(heads, key=lambda h: (h.env.rank, h.started, h.pid))
        pids = [h.pid for h in ordered]
        return JobLayout(
            kind=kind,
            launcher_pid=launcher.pid if launcher is not None else (self.root_pid if self.root_pid not in pids
                                                                    else None),
            launchers=self.launchers_of(pids),
            ranks=tuple((h.pid, h.env.rank) for h in ordered if h.env.rank is not None),  # all: rank heads
            run_id=_first_alive(heads, "run_id"),
            world_size=_first_alive(heads, "world_size"),
            local_world_size=(_first_alive(heads, "local_world_size")
                              or len({h.env.rank for h in heads if h.alive}) or None),
        )


def is_job_of_ranks(heads: Sequence[ProcessFacts]) -> bool:
    """Ranks, not a lone script that happens to set RANK=0: several of them, or a world above one."""
    return len(heads) >= 2 or any((h.env.world_size or 0) > 1 for h in heads)


def _first_alive(processes: Sequence[ProcessFacts], field: str):
    """A field of the live processes first (after a restart the zombies of the old ranks carry stale values)."""
    for f in sorted(processes, key=lambda f: (not f.alive, -f.started)):
        value = getattr(f.env, field)
        if value is not None:
            return value
    return None


@dataclass(frozen=True)
class Attachment:
    """The process the user named and its parent, read from /proc once when gputop starts."""

    pid: int
    name: str
    cmdline: tuple[str, ...]
    env: DistEnv
    parent_pid: int
    parent_name: str
    parent_cmdline: tuple[str, ...]
    parent_python: bool
    parent_env: DistEnv
    ranked_siblings: int  # the parent's children with a rank in their environment, the named one included


@dataclass(frozen=True)
class RootChoice:
    root_pid: int
    attached_rank: int | None = None  # the attached process's rank, when it is a rank and the root its launcher


@dataclass(frozen=True)
class NoteContext:
    """What a job's note is worded from besides its layout."""

    attached_pid: int
    root_pid: int
    attached_rank: int | None  # the rank the user named, followed across restarts
    root_label: str  # how the note names the root: its launcher's name, else its process name
    live_training: int  # live ranks, or 1 for a live main process
    processes: Mapping[int, ProcessFacts]
