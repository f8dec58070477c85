"""torch.multiprocessing.spawn (and start_processes with the spawn method): a Python parent whose children are
the ranks.

multiprocessing's spawn start method runs every child as ``python -c "from multiprocessing.spawn import
spawn_main; spawn_main(...)" --multiprocessing-fork`` (checked with torch 2.13); the children carry no RANK, so
they are numbered by start order (rank 0 first) and a number stays with its process. A DataLoader with
``multiprocessing_context="spawn"`` starts its workers the same way: the parent's stack (a thread in
torch/multiprocessing/spawn.py, ProcessContext.join) tells the two apart once it is sampled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from probes.frame import ROLE_DATALOADER_WORKER
from probes.jobs.facts import HELPER_ROLES, Attachment, JobLayout, ProcessFacts, RootChoice, WatchedTree
from probes.jobs.launchers.base import Launcher
from probes.sensors.proctree import DATALOADER_WORKER_COMM

SPAWN_MAIN_MARKER = "from multiprocessing.spawn import spawn_main"
# The parent's main thread waits in ProcessContext.join here.
MP_SPAWN_SOURCE = "torch/multiprocessing/spawn.py"


def is_spawn_child(cmdline: Sequence[str]) -> bool:
    return SPAWN_MAIN_MARKER in " ".join(cmdline)


class MpSpawn(Launcher):
    kind = "mp.spawn"

    def find(self, tree: WatchedTree) -> JobLayout | None:
        """The first Python process, from the root down, whose spawn_main children are ranks."""
        queue = [tree.root] if tree.root is not None else []
        while queue:
            parent = queue.pop(0)
            kids = tree.children.get(parent.pid, ())
            spawned = _spawned_ranks(parent, kids, tree.spawn_evidence)
            if spawned:
                ranks = _number_by_start(spawned, tree.known_spawn_ranks)
                return JobLayout(
                    kind=self.kind,
                    launcher_pid=parent.pid,
                    launchers=tree.launchers_of([pid for pid, _ in ranks]),
                    ranks=tuple(ranks),
                    world_size=len(spawned),
                    local_world_size=len(spawned),
                )
            queue.extend(k for k in kids if k.role not in HELPER_ROLES)
        return None

    def root_for(self, attached: Attachment) -> RootChoice | None:
        """A spawned child's Python parent (not a DataLoader worker's, which names itself pt_data_worker)."""
        if (attached.env.rank is None and is_spawn_child(attached.cmdline) and attached.name != DATALOADER_WORKER_COMM
                and attached.parent_python and attached.parent_env.rank is None):
            return RootChoice(attached.parent_pid)
        return None

    def stated_local_world_size(self, layout: JobLayout, ranks: Sequence[ProcessFacts]) -> int | None:
        """One parent starts the whole world on its node."""
        return layout.world_size

    def local_rank(self, process: ProcessFacts, rank: int) -> int | None:
        """The children carry no LOCAL_RANK: on their one node, the local rank is the rank."""
        return process.env.local_rank if process.env.local_rank is not None else rank


def _spawned_ranks(parent: ProcessFacts, kids: Sequence[ProcessFacts],
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


def _number_by_start(spawned: Sequence[ProcessFacts], known: Mapping[int, int]) -> list[tuple[int, int]]:
    """Rank = start order; a process keeps the rank it was given, newcomers take the lowest free numbers."""
    taken = {known[f.pid] for f in spawned if f.pid in known}
    assigned = []
    free = (n for n in range(len(spawned) + len(taken) + 1) if n not in taken)
    for f in spawned:  # already in start order
        assigned.append((f.pid, known[f.pid] if f.pid in known else next(free)))
    return sorted(assigned, key=lambda pair: pair[1])
