"""The launchers gputop knows, one module each behind :class:`~probes.jobs.launchers.base.Launcher`, in the
order they are asked (:data:`LAUNCHERS`), and the walks over that order that read one process.

Adding a launcher is one module here, one slot in LAUNCHERS, its name in frame.JobKind, a row in docs/jobs.md's
"Launchers" table and a fixture in tests/fixtures/launchers/ (tests/unit/test_launchers.py fails without each).
find_layout (probes/jobs/layout.py), resolve_root (probes/jobs/root.py) and follow mode
(probes/jobs/follow.py) walk the same tuple.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from probes.frame import JobKind
from probes.jobs.launchers.accelerate import Accelerate
from probes.jobs.launchers.base import Launcher
from probes.jobs.launchers.deepspeed import DeepSpeed
from probes.jobs.launchers.env_ranks import EnvRanks
from probes.jobs.launchers.launched import Launched
from probes.jobs.launchers.lightning import LightningSubprocess
from probes.jobs.launchers.mp_spawn import MpSpawn
from probes.jobs.launchers.mpi import Mpi
from probes.jobs.launchers.slurm import Slurm
from probes.jobs.launchers.torchrun import Torchrun
from probes.sensors.process_facts import DistEnv, gpu_environment, read_environ, slurm_job_of

# The first launcher that finds a job in the watched tree (or claims a process's environment, or the named
# process) decides; so the more specific claim comes first.
LAUNCHERS: tuple[Launcher, ...] = (
    # accelerate launch runs torch's agent in its own process: its ranks carry TORCHELASTIC_* as torchrun's do,
    # so it must claim them (by their parent's command line) before torchrun does.
    Accelerate(),
    # deepspeed.launcher.launch's ranks carry RANK (and, with its elastic agent, TORCHELASTIC_*): claimed by their
    # parent's command line before torchrun and "ranks"; its LOCAL_SIZE/CROSS_RANK read before torch's variables.
    DeepSpeed(),
    # torchrun's ranks carry RANK as any launcher's do: it must claim them (by TORCHELASTIC_* or its agent)
    # before "ranks" does.
    Torchrun(),
    # MPI's ranks are numbered by OMPI_COMM_WORLD_* / PMI_* (and sometimes RANK, or a scheduler's inherited
    # variables, too): MPI's own numbers are read, and its ranks claimed by their mpirun parent, before any
    # launcher that reads a RANK or a scheduler's task number. After torchrun: `mpirun torchrun ...` starts one
    # agent per node, whose ranks inherit the agent's OMPI_* but carry their own RANK.
    Mpi(),
    # Slurm's tasks carry SLURM_PROCID, and often MASTER_ADDR/PORT that "ranks" would claim with no rank: they
    # are read as Slurm's first. After torchrun: torchrun under srun gives its ranks their own RANK, and the
    # agent (a Slurm task itself) then launches them.
    Slurm(),
    # Lightning's children carry LOCAL_RANK, NODE_RANK and WORLD_SIZE but no RANK, and rank 0 (their parent, the
    # user's own process) none: its reader must run before "ranks", which would read them as rankless, and its
    # find before "ranks", which would take the children for the whole job and miss rank 0. After torchrun:
    # under torchrun every rank has RANK and Lightning starts no children.
    LightningSubprocess(),
    # RANK from the environment, started by anything else: a process that names its rank is a rank, whatever
    # its parent looks like, so before the launchers recognised by shape.
    EnvRanks(),
    # spawn_main children of a Python parent carry no RANK; before "launched", which would take that parent
    # for the one training process under a shell.
    MpSpawn(),
    # One Python process under a launcher: the catch-all, found by shape alone, so last.
    Launched(),
)


def launcher_of_kind(kind: JobKind) -> Launcher:
    return next(launcher for launcher in LAUNCHERS if launcher.kind == kind)


def launcher_of_process(name: str, cmdline: Sequence[str]) -> Launcher | None:
    """The launcher whose own process this is (torchrun's agent), or None."""
    return next((launcher for launcher in LAUNCHERS if launcher.is_launcher_process(name, cmdline)), None)


def launcher_label(name: str, cmdline: Sequence[str]) -> str:
    """How a note names a process: as the user typed its launcher ("accelerate launch", "torchrun"), else by its
    process name; torchrun's agent's comm, pt_elastic, says little."""
    launcher = launcher_of_process(name, cmdline)
    return launcher.command_name(cmdline) if launcher is not None else (name or "PID")


def parse_dist_env(environ: Mapping[str, str]) -> DistEnv:
    """The distributed variables of an environment, as the first launcher whose variables it carries reads
    them (a malformed number reads as unset); else only its CUDA_VISIBLE_DEVICES."""
    env = next((found for found in (launcher.rank_variables(environ) for launcher in LAUNCHERS)
                if found is not None), None) or gpu_environment(environ)
    # Slurm wraps any launcher (torchrun under srun): its job id rides along whichever launcher read the ranks.
    slurm_job = slurm_job_of(environ)
    return dataclasses.replace(env, slurm_job=slurm_job) if slurm_job is not None else env


def read_dist_env(pid: int) -> DistEnv:
    """The process's distributed variables as it was started (/proc/PID/environ); NO_ENV when unreadable."""
    return parse_dist_env(read_environ(pid))
