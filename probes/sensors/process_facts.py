"""What one process says about itself: its distributed environment, its start time and its command line.

Launcher-neutral reading only: :class:`DistEnv` (the distributed variables a launcher gave a process),
torch.distributed's own variables (RANK, WORLD_SIZE, MASTER_ADDR, ..., which most launchers set), the variables
that say a job spans other nodes (other_nodes_named), and single files of /proc read through probes/textfiles
(environ, stat, comm) or psutil (cmdline, exe), and for the model a job states on its command line
(probes/jobs/job_command_line.py) its raw cmdline, cwd and stdout. Which launcher's variables a process carries
is the launchers' business (probes/jobs/launchers/).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psutil

from probes.sensors.textfiles import read_text

_PYTHON_NAME = re.compile(r"^(python|pypy)[\d.]*$")
NOTE_COMMAND_CHARS = 60


@dataclass(frozen=True)
class DistEnv:
    """The distributed-training variables of one process's environment (None where unset or not a number)."""

    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    group_rank: int | None = None
    node_rank: int | None = None  # NODE_RANK: Lightning's launcher gives it to the ranks it starts
    restart_count: int | None = None  # TORCHELASTIC_RESTART_COUNT
    run_id: str | None = None  # TORCHELASTIC_RUN_ID
    master_addr: str | None = None
    master_port: int | None = None
    cuda_visible_devices: str | None = None
    slurm_step: str | None = None  # a Slurm task's JOBID.STEP (SLURM_JOB_ID, SLURM_STEP_ID)
    # The Slurm job (and step) the process runs in, whichever launcher started it (torchrun under srun, ...):
    # the one name of the job that every node's processes carry (slurm_job_of).
    slurm_job: str | None = None

    @property
    def torchelastic(self) -> bool:
        return self.run_id is not None or self.restart_count is not None


NO_ENV = DistEnv()

# torch.distributed's env:// variables: torchrun sets them, and so do scripts and other launchers.
TORCH_DISTRIBUTED_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                               "MASTER_PORT")


def parse_environ(block: str | None) -> dict[str, str]:
    """{name: value} from the NUL-separated text of /proc/PID/environ ({} for None or an empty file)."""
    environ = {}
    for entry in (block or "").split("\0"):
        name, sep, value = entry.partition("=")
        if sep and name:
            environ[name] = value
    return environ


def int_or_none(value: str | None) -> int | None:
    """A variable's number; None when unset or malformed (a malformed number reads as unset)."""
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


def gpu_environment(environ: Mapping[str, str]) -> DistEnv:
    """The part of any process's environment the GPU mapping reads (CUDA_VISIBLE_DEVICES), with no rank."""
    return DistEnv(cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"))


def torch_distributed_env(environ: Mapping[str, str]) -> DistEnv:
    """torch.distributed's variables (RANK, LOCAL_RANK, WORLD_SIZE, ...) of an environment, as they are set."""
    return DistEnv(
        rank=int_or_none(environ.get("RANK")),
        local_rank=int_or_none(environ.get("LOCAL_RANK")),
        world_size=int_or_none(environ.get("WORLD_SIZE")),
        local_world_size=int_or_none(environ.get("LOCAL_WORLD_SIZE")),
        group_rank=int_or_none(environ.get("GROUP_RANK")),
        master_addr=environ.get("MASTER_ADDR") or None,
        master_port=int_or_none(environ.get("MASTER_PORT")),
        cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
    )


def slurm_job_of(environ: Mapping[str, str]) -> str | None:
    """The Slurm job a process runs in, as every node of it names it: JOBID.STEP for a process of a job step
    (`srun torchrun ...` on each node: one step, the same id everywhere; two steps of one allocation are two
    jobs), JOBID in the batch script (no SLURM_STEP_ID there); None outside Slurm."""
    job = (environ.get("SLURM_JOB_ID") or "").strip()
    if not job:
        return None
    step = (environ.get("SLURM_STEP_ID") or "").strip()
    return f"{job}.{step}" if step else job


def read_environ(pid: int) -> dict[str, str]:
    """The environment the process was exec'd with (/proc/PID/environ); {} when unreadable.

    A launcher sets its ranks' variables there, and a DataLoader worker forked from a rank carries a copy of
    its rank's.
    """
    return parse_environ(read_text(f"/proc/{pid}/environ"))


def start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (/proc/PID/stat field 22): with the PID, it names
    one process (a PID can be reused), and it orders siblings by start."""
    stat = read_text(f"/proc/{pid}/stat")
    if not stat:
        return None
    fields = stat.rpartition(")")[2].split()  # comm, before ")", may hold spaces
    return int_or_none(fields[19]) if len(fields) > 19 else None


@dataclass(frozen=True)
class ProcessStat:
    """What /proc/PID/stat says of a process's place: its parent, its process group, its thread count."""

    ppid: int
    pgid: int  # its process group: a shell's job (or setsid) makes a process its group's leader (pgid == pid)
    threads: int


def read_process_stat(pid: int) -> ProcessStat | None:
    """/proc/PID/stat's ppid, pgrp and num_threads (fields 4, 5 and 20); None when gone or unreadable."""
    fields = (read_text(f"/proc/{pid}/stat") or "").rpartition(")")[2].split()
    if len(fields) < 18:
        return None
    ppid, pgid, threads = int_or_none(fields[1]), int_or_none(fields[2]), int_or_none(fields[17])
    if ppid is None or pgid is None or threads is None:
        return None
    return ProcessStat(ppid=ppid, pgid=pgid, threads=threads)


# Variables that say a job spans more than one node: a count of its nodes (Slurm's, torchrun's --nnodes as
# PET_NNODES, its GROUP_WORLD_SIZE), or this node's number above 0 (there is a node before it).
_NODE_COUNT_VARIABLES = ("SLURM_JOB_NUM_NODES", "SLURM_NNODES", "PET_NNODES", "GROUP_WORLD_SIZE")
_NODE_NUMBER_VARIABLES = ("NODE_RANK", "GROUP_RANK", "SLURM_NODEID", "CROSS_RANK")


def other_nodes_named(environ: Mapping[str, str]) -> str | None:
    """The variable that says the job runs on other nodes besides this one ("SLURM_NNODES=2"); None when none
    does. An elastic range (PET_NNODES=1:4) counts by its upper end."""
    for name in _NODE_COUNT_VARIABLES:
        count = int_or_none((environ.get(name) or "").rpartition(":")[2] or None)
        if count is not None and count > 1:
            return f"{name}={environ[name]}"
    for name in _NODE_NUMBER_VARIABLES:
        number = int_or_none(environ.get(name))
        if number is not None and number > 0:
            return f"{name}={environ[name]}"
    return None


def process_name(pid: int) -> str:
    return (read_text(f"/proc/{pid}/comm") or "").rstrip("\n")


def process_cmdline(pid: int) -> tuple[str, ...]:
    try:
        return tuple(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ()


def process_arguments(pid: int) -> list[str] | None:
    """Its arguments byte for byte as /proc/PID/cmdline holds them (empty ones left out, what is not UTF-8
    replaced), for readers that look for files in them; None when unreadable. Not process_cmdline: psutil splits
    a command line the process rewrote at its spaces, which suits showing it, not opening what it names."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def process_cwd(pid: int) -> str | None:
    """Its working directory (/proc/PID/cwd); None when it is gone or not ours to read."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def stdout_file(pid: int) -> str | None:
    """The regular file its stdout writes to (/proc/PID/fd/1); None for a pipe, a terminal, or an fd not ours
    to read."""
    try:
        path = os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        return None
    return path if os.path.isfile(path) else None


def process_executable(pid: int) -> str | None:
    try:
        return psutil.Process(pid).exe() or None
    except (psutil.Error, OSError):
        return None


def is_python_command(cmdline: Sequence[str], exe: str | None = None) -> bool:
    """Whether a command line (or the executable) is a Python interpreter's: python3.11, pypy3, ..."""
    names = [os.path.basename(cmdline[0])] if cmdline else []
    if exe:
        names.append(os.path.basename(exe))
    return any(_PYTHON_NAME.match(name) for name in names)


def python_writes_unbuffered(cmdline: Sequence[str], environ: Mapping[str, str]) -> bool:
    """Whether a Python interpreter writes stdout unbuffered: `-u` among its own options (alone or in a cluster,
    `-uB`), or PYTHONUNBUFFERED set non-empty. Else print() into a file is block-buffered (8 KiB): a log can hold
    no step line for minutes while the job trains."""
    if environ.get("PYTHONUNBUFFERED"):
        return True
    args = list(cmdline[1:])
    while args:
        arg = args.pop(0)
        if arg in _PYTHON_OPTIONS_WITH_VALUE:
            if args:
                args.pop(0)
            continue
        if not arg.startswith("-") or arg.startswith("--") or arg[1:2] in ("m", "c", "X", "W"):
            return False  # the program starts here (or an option whose value follows): -u comes before it
        if "u" in arg[1:]:
            return True
    return False


# Interpreter options that take the next argument as their value (python -X dev -W error -m ...).
_PYTHON_OPTIONS_WITH_VALUE = frozenset({"-X", "-W", "--check-hash-based-pycs"})


@dataclass(frozen=True)
class PythonProgram:
    """What a Python command line runs: a module (`-m torch.distributed.run`) or a script, and its arguments."""

    module: str | None
    script: str | None
    args: tuple[str, ...]


def python_program(cmdline: Sequence[str]) -> PythonProgram | None:
    """What an interpreter's command line (`python [options] -m module ...` or `python [options] script ...`)
    runs; None for `-c`, a bare interpreter, or an empty command line. Only the program counts: a later argument
    that names a launcher (`conda run torchrun ...`) is that program's argument."""
    args = list(cmdline[1:])
    while args:
        arg = args.pop(0)
        if arg == "-m" or (arg.startswith("-m") and not arg.startswith("--")):
            module = arg[2:] or (args.pop(0) if args else "")
            return PythonProgram(module, None, tuple(args)) if module else None
        if arg == "-c" or (arg.startswith("-c") and not arg.startswith("--")):
            return None
        if arg in _PYTHON_OPTIONS_WITH_VALUE:
            if args:
                args.pop(0)
            continue
        if not arg.startswith("-"):
            return PythonProgram(None, arg, tuple(args))
    return None


def short_command(cmdline: Sequence[str]) -> str:
    """'python train.py --lr 3e-4' from ['/usr/bin/python3.11', 'train.py', ...]: the program's base name and
    its arguments, cut to fit a line."""
    if not cmdline:
        return "?"
    text = " ".join([os.path.basename(cmdline[0]), *cmdline[1:]])
    return text if len(text) <= NOTE_COMMAND_CHARS else text[: NOTE_COMMAND_CHARS - 3] + "..."
