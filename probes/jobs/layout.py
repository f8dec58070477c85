"""The layout of the watched tree, a pure function of it: which launcher's job it is, and the roles that follow.

:func:`find_layout` asks the launchers in LAUNCHERS' order; :func:`apply_layout` gives each process its role
(rank, main, launcher), each rank its fields from its environment, and each helper (DataLoader worker, compile
worker) the training process it works for. :func:`stack_evidence` reads what the latest stacks say about
launchers (a parent inside torch's spawn, a main thread waiting in subprocess).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from probes.frame import ROLE_LAUNCHER, ROLE_MAIN, ROLE_RANK, ProcessSample, StacksReading
from probes.jobs.facts import JobLayout, ProcessFacts, WatchedTree, ancestors
from probes.jobs.launchers import LAUNCHERS, launcher_of_kind
from probes.jobs.launchers.mp_spawn import MP_SPAWN_SOURCE

# A Python launcher waiting for its child in subprocess's wait or communicate loop (a pipe poll) shows it only
# in its stack; one in the kernel's wait4 shows it in /proc/PID/wchan too (the tracker reads that).
_SUBPROCESS_SOURCES = ("/subprocess.py", "/asyncio/subprocess.py")


def find_layout(
    root_pid: int,
    facts: Sequence[ProcessFacts],
    spawn_evidence: Mapping[int, bool] | None = None,
    known_spawn_ranks: Mapping[int, int] | None = None,
    previous_main: int | None = None,
) -> JobLayout | None:
    """How the tree rooted at `root_pid` is a job, or None when it is one process (and its helpers) alone.

    The first launcher of LAUNCHERS that finds its job decides. spawn_evidence: {pid: whether its sampled stack
    is in torch's spawn} for processes whose stack is known; known_spawn_ranks and previous_main keep earlier
    choices while those processes live.
    """
    tree = WatchedTree(root_pid, facts, spawn_evidence, known_spawn_ranks, previous_main)
    if tree.root is None:
        return None
    return next((layout for launcher in LAUNCHERS if (layout := launcher.find(tree)) is not None), None)


def apply_layout(layout: JobLayout, processes: Sequence[ProcessSample],
                 by_pid: Mapping[int, ProcessFacts]) -> tuple[ProcessSample, ...]:
    """The samples with the layout's roles, each rank's fields from its environment, and each helper's
    owner_pid: the rank or main process it works for (its nearest such ancestor)."""
    launcher = launcher_of_kind(layout.kind)
    parent_of = {pid: f.ppid for pid, f in by_pid.items()}
    ranks = dict(layout.ranks)
    training = set(layout.training_pids)
    launchers = set(layout.launchers)
    updated = []
    for sample in processes:
        facts = by_pid[sample.pid]
        if sample.pid in ranks:
            env = facts.env
            sample = dataclasses.replace(
                sample, role=ROLE_RANK, rank=ranks[sample.pid],
                local_rank=launcher.local_rank(facts, ranks[sample.pid]),
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
            owner = next((a for a in ancestors(sample.pid, parent_of) if a in training), None)
            if owner is not None:
                sample = dataclasses.replace(sample, owner_pid=owner)
        updated.append(sample)
    return tuple(updated)


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
