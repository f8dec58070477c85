"""Follow mode's census: which training jobs run on this node now, each named by the PID whose tree to watch.

A job is found three ways: a launcher's own process (LAUNCHERS recognise it: torchrun's agent, with the ranks
under it); a Python process whose environment names its rank (RANK, as srun wrappers and custom launchers set
it) outside any such launcher; a Python process holding a GPU context (NVML lists it). The job picker
(probes/jobs/census.py) adds a fourth: a Python process that imports torch, as its caller's predicate says.
What a job is, and which process's tree is its root (a rank's launcher, mp.spawn's parent), probes/jobs/root.py
decides, as it does for `gputop --pid`; this module only looks for candidates across the machine. A process started by
multiprocessing (a DataLoader worker forked from a rank) is followed up to the process that started it, so a
job is found once, from its top.

``find_training_jobs`` never raises: a process that ends or hides its details while being read is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from probes.jobs.facts import ancestors
from probes.jobs.launchers import launcher_of_process, read_dist_env
from probes.jobs.launchers.mp_spawn import is_spawn_child
from probes.jobs.root import resolve_root
from probes.sensors.process_facts import is_python_command
from probes.sensors.proctree import NodeProcess, node_processes
from probes.sensors.slurm import agent_processes


@dataclass(frozen=True)
class FoundJob:
    root_pid: int  # the process whose tree gputop watches: the launcher, or the top of a training process
    why: str  # one line: "torchrun launcher", "RANK=0 in its environment", "PID 12 holds a GPU context"


def _is_python(proc: NodeProcess) -> bool:
    return is_python_command(proc.cmdline) or proc.name.startswith("python")


def _top(pid: int, procs: dict[int, NodeProcess]) -> int:
    """Up through the Python processes that started this one by multiprocessing (spawn's command line says so;
    fork keeps the parent's command line), to the process that started them."""
    while True:
        proc = procs.get(pid)
        parent = procs.get(proc.ppid) if proc is not None else None
        if proc is None or parent is None or not _is_python(parent):
            return pid
        if not (proc.cmdline == parent.cmdline or is_spawn_child(proc.cmdline)):
            return pid
        pid = parent.pid


IMPORTS_TORCH = "imports torch"


def _rank_variable(pid: int) -> str | None:
    env = read_dist_env(pid)
    return None if env.rank is None else f"RANK={env.rank} in its environment"


def find_training_jobs(gpu_pids: Iterable[int] = (), exclude: Iterable[int] = (),
                       procs: dict[int, NodeProcess] | None = None,
                       imports_torch: Callable[[int], bool] | None = None) -> list[FoundJob]:
    """The training jobs on this node, by root PID (ascending). `gpu_pids`: processes holding a GPU context
    (local PIDs, from NVML); `exclude`: PIDs never to report; `imports_torch`: when given, a Python process
    (not part of a job found already) for which it says True is a job too. What the caller started (py-spy) is
    never a job, nor are the caller's ancestors (a tree that holds gputop is never watched, as in root.py), nor
    other gputops' agents with their Slurm steps and py-spy (probes.sensors.slurm.agent_processes)."""
    me = os.getpid()
    procs = dict(node_processes() if procs is None else procs)
    parent_of = {pid: proc.ppid for pid, proc in procs.items()}
    parent_of.setdefault(me, os.getppid())  # gputop itself, whether or not the table holds it
    excluded = {me, *exclude, *ancestors(me, parent_of), *agent_processes(procs)}
    procs = {pid: proc for pid, proc in procs.items() if pid not in excluded and me not in ancestors(pid, parent_of)}
    parent_of = {pid: proc.ppid for pid, proc in procs.items()}
    found: dict[int, FoundJob] = {}
    launchers = {pid: launcher for pid, proc in procs.items()
                 if (launcher := launcher_of_process(proc.name, proc.cmdline)) is not None}
    for pid in sorted(launchers):
        if not launchers.keys() & set(ancestors(pid, parent_of)):  # an agent under torchrun is part of its job
            found[pid] = FoundJob(pid, f"{launchers[pid].kind} launcher")

    # Jobs found only because they import torch: a Python process that does (a notebook kernel, a sweep driver,
    # a test runner) may start a training process of its own with subprocess; that one is a job in its own right,
    # not part of the parent's, unless multiprocessing started it (a DataLoader worker, a spawned rank).
    found_by_import: set[int] = set()

    def covered(pid: int) -> bool:
        if pid in found:
            return True
        above = found.keys() & set(ancestors(pid, parent_of))
        if _top(pid, procs) == pid:  # started by something other than multiprocessing
            above -= found_by_import
        return bool(above)

    def add(pid: int, why: str) -> None:
        root = resolve_root(_top(pid, procs)).root_pid
        if not covered(root):
            found.setdefault(root, FoundJob(root, why))
            if why == IMPORTS_TORCH:
                found_by_import.add(root)

    for pid in sorted(set(gpu_pids)):
        if pid in procs and _is_python(procs[pid]) and not covered(pid):
            add(pid, f"PID {pid} holds a GPU context")
    for pid, proc in sorted(procs.items()):
        if _is_python(proc) and not covered(pid):
            why = _rank_variable(pid)
            if why is None and imports_torch is not None and imports_torch(pid):
                why = IMPORTS_TORCH
            if why is not None:
                add(pid, why)
    return [found[pid] for pid in sorted(found)]
