"""Follow mode's census: which training jobs run on this node now, each named by the PID whose tree to watch.

A job is found three ways: a launcher (torchrun, torch.distributed.launch) with its ranks under it; a process
whose environment names its rank (RANK, set by torchrun, srun wrappers, custom launchers) outside any
launcher; a Python process holding a GPU context (NVML lists it). A process started by multiprocessing
(mp.spawn, a DataLoader worker) is followed up to the Python process that started it, so a job is watched
once from its top, not once per process.

``find_training_jobs`` never raises: a process that ends or hides its details while being read is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch", "torch.distributed.elastic.agent")
LAUNCHER_SCRIPTS = ("torchrun",)
RANK_VARIABLES = ("RANK", "LOCAL_RANK")


@dataclass(frozen=True)
class FoundJob:
    root_pid: int  # the process whose tree gputop watches: the launcher, or the top of a training process
    why: str  # one line: "torchrun launcher", "RANK=0 in its environment", "holds a GPU context"


@dataclass(frozen=True)
class _Proc:
    pid: int
    ppid: int
    cmdline: tuple[str, ...]
    python: bool


def is_python(name: str, cmdline: tuple[str, ...]) -> bool:
    program = os.path.basename(cmdline[0]) if cmdline else name
    return program.startswith("python") or name.startswith("python") or name in LAUNCHER_SCRIPTS


def is_launcher(cmdline: tuple[str, ...]) -> bool:
    """torchrun (its script or `python -m torch.distributed.run`), or the older torch.distributed.launch."""
    if not cmdline:
        return False
    if os.path.basename(cmdline[0]) in LAUNCHER_SCRIPTS:
        return True
    head = cmdline[:4]
    if any(os.path.basename(arg) in LAUNCHER_SCRIPTS for arg in head[1:2]):  # python /usr/bin/torchrun ...
        return True
    return any(arg in LAUNCHER_MODULES for arg in head) and "-m" in head


def _scan(exclude: set[int]) -> dict[int, _Proc]:
    procs = {}
    for process in psutil.process_iter(["pid", "ppid", "name", "cmdline"]):
        info = process.info
        if info["pid"] in exclude or info["pid"] <= 1:
            continue
        cmdline = tuple(info.get("cmdline") or ())
        procs[info["pid"]] = _Proc(info["pid"], info.get("ppid") or 0, cmdline,
                                   is_python(info.get("name") or "", cmdline))
    return procs


def _ancestors(pid: int, procs: dict[int, _Proc]) -> list[int]:
    chain, seen = [], set()
    while pid in procs and pid not in seen:
        seen.add(pid)
        pid = procs[pid].ppid
        chain.append(pid)
    return chain


def _top(pid: int, procs: dict[int, _Proc]) -> int:
    """Up through the Python processes that started this one by multiprocessing (spawn's command line names
    it; fork keeps the parent's command line), to the process that started them."""
    while True:
        proc = procs.get(pid)
        parent = procs.get(proc.ppid) if proc is not None else None
        if proc is None or parent is None or not parent.python:
            return pid
        forked = proc.cmdline == parent.cmdline
        spawned = any("multiprocessing" in arg for arg in proc.cmdline)
        if not (forked or spawned):
            return pid
        pid = parent.pid


def _has_rank(pid: int) -> str | None:
    try:
        environ = psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return None
    for name in RANK_VARIABLES:
        if name in environ:
            return f"{name}={environ[name]} in its environment"
    return None


def find_training_jobs(gpu_pids: Iterable[int] = (), exclude: Iterable[int] = ()) -> list[FoundJob]:
    """The training jobs on this node, by root PID (ascending). `gpu_pids`: processes holding a GPU context
    (local PIDs, from NVML); `exclude`: PIDs never to report (gputop itself and what it started)."""
    me = os.getpid()
    excluded = {me, *exclude}
    try:
        procs = _scan(excluded)
    except (psutil.Error, OSError):
        return []
    for pid in list(procs):  # what gputop started (py-spy) is not a job
        if me in _ancestors(pid, procs):
            del procs[pid]
    found: dict[int, FoundJob] = {}
    launchers = {pid for pid, proc in procs.items() if proc.python and is_launcher(proc.cmdline)}
    for pid in launchers:
        if not launchers.intersection(_ancestors(pid, procs)):  # an agent under torchrun is part of its job
            found[pid] = FoundJob(pid, "torchrun launcher")

    def covered(pid: int) -> bool:
        return pid in found or bool(found.keys() & set(_ancestors(pid, procs)))

    for pid in sorted(set(gpu_pids)):
        if pid in procs and procs[pid].python and not covered(pid):
            root = _top(pid, procs)
            found.setdefault(root, FoundJob(root, f"PID {pid} holds a GPU context"))
    for pid, proc in sorted(procs.items()):
        if not proc.python or covered(pid):
            continue
        why = _has_rank(pid)
        if why is not None:
            root = _top(pid, procs)
            found.setdefault(root, FoundJob(root, why))
    return [found[pid] for pid in sorted(found)]
