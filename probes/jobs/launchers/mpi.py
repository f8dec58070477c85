"""MPI launchers: ``mpirun``/``mpiexec`` of Open MPI and of MPICH (hydra), whose ranks learn their number from
MPI's variables rather than torch's (a script maps them to RANK/WORLD_SIZE in-process, where /proc cannot see).

Open MPI (checked with 4.1.4: ``mpirun -np 2 python train.py``) starts the ranks of a node as children of
``mpirun`` (5.x: of ``prterun``; on other nodes of ``orted``/``prted``) with OMPI_COMM_WORLD_RANK,
OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_SIZE and OMPI_COMM_WORLD_LOCAL_SIZE. MPICH's hydra starts them under
``hydra_pmi_proxy`` with PMI_RANK, PMI_SIZE, MPI_LOCALRANKID and MPI_LOCALNRANKS.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence

from probes.jobs.facts import Attachment, JobLayout, RootChoice, WatchedTree, is_job_of_ranks
from probes.jobs.launchers.base import Launcher
from probes.sensors.process_facts import DistEnv, int_or_none, torch_distributed_env

# (rank, local rank, world size, local world size) as each MPI names them.
OPEN_MPI_VARIABLES = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
                      "OMPI_COMM_WORLD_LOCAL_SIZE")
MPICH_VARIABLES = ("PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE", "MPI_LOCALNRANKS")
# The processes whose children are the ranks on a node (a comm is cut to 15 characters).
MPI_LAUNCHERS = frozenset({"mpirun", "mpiexec", "orterun", "orted", "prterun", "prted", "mpiexec.hydra",
                           "hydra_pmi_proxy"})


def is_mpi_launcher(name: str, cmdline: Sequence[str]) -> bool:
    return name in MPI_LAUNCHERS or (bool(cmdline) and os.path.basename(cmdline[0]) in MPI_LAUNCHERS)


class Mpi(Launcher):
    kind = "mpirun"

    def rank_variables(self, environ: Mapping[str, str]) -> DistEnv | None:
        """MPI's numbers, over any scheduler variable a rank inherited (mpirun in a Slurm batch script: every
        rank carries the batch shell's SLURM_PROCID=0); torch's own (MASTER_ADDR, ...) where the job exported
        them. Not PMI_RANK equal to SLURM_PROCID: that is srun acting as the PMI server (`srun --mpi=pmi2`), a
        Slurm task for Slurm's reader."""
        names = next((names for names in (OPEN_MPI_VARIABLES, MPICH_VARIABLES) if names[0] in environ), None)
        if names is None or (names is MPICH_VARIABLES and environ.get("PMI_RANK") == environ.get("SLURM_PROCID")):
            return None
        rank, local_rank, world_size, local_world_size = (int_or_none(environ.get(name)) for name in names)
        return dataclasses.replace(torch_distributed_env(environ), rank=rank, local_rank=local_rank,
                                   world_size=world_size, local_world_size=local_world_size)

    def is_launcher_process(self, name: str, cmdline: Sequence[str]) -> bool:
        return is_mpi_launcher(name, cmdline)

    def command_name(self, cmdline: Sequence[str]) -> str:
        return os.path.basename(cmdline[0]) if cmdline and os.path.basename(cmdline[0]) in MPI_LAUNCHERS \
            else self.kind

    def find(self, tree: WatchedTree) -> JobLayout | None:
        """The ranks when their common parent is an MPI launcher."""
        heads = tree.rank_heads
        parent = tree.common_parent(heads)
        if is_job_of_ranks(heads) and parent is not None and is_mpi_launcher(parent.name, parent.cmdline):
            return tree.ranks_layout(self.kind, heads)
        return None

    def root_for(self, attached: Attachment) -> RootChoice | None:
        """A rank's MPI launcher."""
        if attached.env.rank is not None and is_mpi_launcher(attached.parent_name, attached.parent_cmdline):
            return RootChoice(attached.parent_pid, attached_rank=attached.env.rank)
        return None
