"""PyTorch Lightning's and Lightning Fabric's subprocess launcher (``_SubprocessScriptLauncher``): the user's own
``python train.py`` is rank 0 and the root of the job, and starts ranks 1..N-1 as its children.

What its source does (lightning_fabric/strategies/launchers/subprocess_script.py, pytorch_lightning's launcher
reuses it; checked with pytorch-lightning 2.6): rank 0 sets MASTER_ADDR, MASTER_PORT, NODE_RANK, LOCAL_RANK and
WORLD_SIZE in its own ``os.environ`` (so its exec-time environment, /proc/PID/environ, has none of them) and
``subprocess.Popen``s ``[sys.executable, abspath(argv[0]), *argv[1:]]`` (or ``-m module``) once per local rank
1..N-1 with a copy of that environment: LOCAL_RANK, NODE_RANK and WORLD_SIZE, never RANK. A child's global rank is
NODE_RANK × (processes per node) + LOCAL_RANK. The children's command line is not rank 0's byte for byte (the
interpreter's full path, the script's absolute path), so they are recognised by their environment and their
parent, not by comparing command lines.
"""

from __future__ import annotations

from collections.abc import Mapping

from probes.jobs.facts import HELPER_ROLES, Attachment, JobLayout, NoteContext, ProcessFacts, RootChoice, WatchedTree
from probes.jobs.launchers.base import Launcher
from probes.sensors.process_facts import DistEnv, int_or_none, short_command, torch_distributed_env
from probes.sensors.proctree import DATALOADER_WORKER_COMM

# All three are set on every child Lightning starts; a process with RANK was started by something else.
_CHILD_VARIABLES = ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE")


class LightningSubprocess(Launcher):
    kind = "lightning"

    def rank_variables(self, environ: Mapping[str, str]) -> DistEnv | None:
        """A child's variables. Its rank is its LOCAL_RANK on node 0; on another node the number of processes
        per node is not in the environment, so the rank is left for find() to work out from the tree."""
        if "RANK" in environ or not all(name in environ for name in _CHILD_VARIABLES):
            return None
        env = torch_distributed_env(environ)
        node_rank = int_or_none(environ.get("NODE_RANK"))
        return DistEnv(
            rank=env.local_rank if node_rank == 0 else None,
            local_rank=env.local_rank,
            world_size=env.world_size,
            node_rank=node_rank,
            master_addr=env.master_addr,
            master_port=env.master_port,
            cuda_visible_devices=env.cuda_visible_devices,
        )

    def find(self, tree: WatchedTree) -> JobLayout | None:
        """The first process, in start order, that started Lightning children: it is rank 0 of its node."""
        started: dict[int, list[ProcessFacts]] = {}
        for f in tree.processes:
            parent = tree.by_pid.get(f.ppid) if f.ppid is not None else None
            if parent is not None and _is_lightning_child(f, parent):
                started.setdefault(parent.pid, []).append(f)
        if not started:
            return None
        rank_zero = min((tree.by_pid[pid] for pid in started), key=lambda f: (f.started, f.pid))
        children = started[rank_zero.pid]
        # Lightning starts the same number of processes on every node: this node's count is its local world.
        local_world = max(c.env.local_rank or 0 for c in children) + 1
        node_rank = next((c.env.node_rank for c in children if c.env.node_rank is not None), 0)
        first = node_rank * local_world
        ranks = [(rank_zero.pid, first)] + sorted(
            ((c.pid, first + (c.env.local_rank or 0)) for c in children), key=lambda pair: (pair[1], pair[0]))
        rank_pids = {pid for pid, _ in ranks}
        return JobLayout(
            kind=self.kind,
            launcher_pid=rank_zero.pid,
            launchers=tuple(pid for pid in tree.launchers_of(list(rank_pids)) if pid not in rank_pids),
            ranks=tuple(ranks),
            world_size=next((c.env.world_size for c in children if c.alive and c.env.world_size), None),
            local_world_size=local_world,
        )

    def root_for(self, attached: Attachment) -> RootChoice | None:
        """A child's parent, which is rank 0 and the process the user started."""
        env = attached.env
        if (env.node_rank is not None and (env.local_rank or 0) >= 1 and attached.name != DATALOADER_WORKER_COMM
                and attached.parent_python and attached.parent_env.local_rank is None):
            return RootChoice(attached.parent_pid, attached_rank=env.rank)
        return None

    def local_rank(self, process: ProcessFacts, rank: int) -> int | None:
        """Rank 0 carries no LOCAL_RANK in its exec-time environment: it is local rank 0."""
        return process.env.local_rank if process.env.local_rank is not None else 0

    def keeps_job_without_training(self, root: ProcessFacts) -> bool:
        """A Python root is rank 0 itself: once its children are gone it is one process training alone; a shell
        above it still stands for the job between programs."""
        return not root.python

    def note(self, layout: JobLayout, context: NoteContext) -> str:
        """Worded around rank 0, which is both the command the user typed and the launcher of the others (the
        shared wording would call it a rank whose launcher is out of sight). A shell above it: the shared words."""
        if not layout.ranks or layout.ranks[0][0] != context.root_pid:
            return super().note(layout, context)
        rank_zero_pid, rank_zero = layout.ranks[0]
        process = context.processes.get(rank_zero_pid)
        command = short_command(process.cmdline) if process is not None else "?"
        ranks = f"{context.live_training} rank{'s' if context.live_training != 1 else ''} on this node"
        if context.attached_pid == rank_zero_pid:
            return (f"attached to {command} (PID {rank_zero_pid}): a Lightning job whose rank {rank_zero} is this "
                    f"process and starts the others as its children; watching {ranks}")
        rank = dict(layout.ranks).get(context.attached_pid, context.attached_rank)
        named = f"rank {rank}" if rank is not None else "PID"
        return (f"attached to {named} (PID {context.attached_pid}): watching the Lightning job under its rank "
                f"{rank_zero}, {command} (PID {rank_zero_pid}), {ranks}; --process-only watches PID "
                f"{context.attached_pid} alone")


def _is_lightning_child(f: ProcessFacts, parent: ProcessFacts) -> bool:
    """A rank Lightning started: its variables in the environment, not a helper (a DataLoader worker forked from a
    child inherits them), under a Python parent whose own exec-time environment names no local rank."""
    return (f.env.node_rank is not None and (f.env.local_rank or 0) >= 1 and f.role not in HELPER_ROLES
            and parent.python and parent.env.local_rank is None)
