"""`gputop probe --like PID`, the reading: the job behind a PID, the settings its command line states
(probes/jobs/job_command_line.py), its process tree's environments and what NVML lists on each GPU, turned into
what the probe runs with by probes/reference/like_settings.py. Never runs, imports or unpickles anything of the job.

A PID that names no process, one whose /proc files cannot be read, or a command line no reader knows is one line
(LikeJobError); so is a setting the job does not state and no flag gives, and a GPU the job uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from probes.frame import GpuReading
from probes.jobs.job_command_line import job_settings
from probes.jobs.launchers import read_dist_env
from probes.jobs.root import resolve_root_safely
from probes.models.stated_settings import SettingName
from probes.reference.like_settings import (
    Given,
    LikeJob,
    LikeJobError,
    check_gpus,
    model_label,
    resolve,
    shape_for,
    value_of,
)
from probes.sensors.nvml import read_once
from probes.sensors.process_facts import DistEnv, process_arguments, process_cwd, short_command
from probes.sensors.proctree import ProcessTreeProbe, target_exists

NOT_A_JOB = ("is not a job whose settings gputop can read: neither nanoGPT's train.py (configurator.py beside it) "
             "nor a Hugging Face config.json is on its command line; time the reference with --model and "
             "--batch-size instead of --like")


@dataclass(frozen=True)
class LikePlan:
    """What the probe runs with for `--like PID`: the job's settings resolved against the flags given."""

    like: LikeJob
    shape: Any  # a probes.models ModelShape
    model: str  # what the report calls it
    batch_size: int
    grad_accum: int
    dtype: str
    compile: bool


def plan_like(pid: int, given: Mapping[SettingName, Given], device: str, own_cuda_visible_devices: str | None,
              nvml: Any = None) -> LikePlan:
    """Read the job `pid` and resolve its settings against `given`; LikeJobError (one line) when the probe cannot
    time its step here. `nvml`: a pynvml module (tests pass a fake); None reads the real one."""
    if not target_exists(pid):
        raise LikeJobError(f"no process {pid} here: --like takes the PID of a running training job")
    argv = process_arguments(pid)
    if argv is None or process_cwd(pid) is None:
        raise LikeJobError(f"cannot read PID {pid}'s command line and working directory (/proc/{pid}): run gputop as "
                           "the job's user")
    aliases, environments = _job_tree(pid)
    world = max((env.world_size for env in environments.values() if env.world_size), default=None)
    stated = job_settings(pid, world)
    if stated is None:
        raise LikeJobError(f"PID {pid} ({short_command(argv)}) {NOT_A_JOB}")
    check = check_gpus(_gpu_reading(aliases, nvml, device), environments, pid, device, own_cuda_visible_devices)
    if check.refusal is not None:
        raise LikeJobError(check.refusal)
    settings = resolve(pid, stated, given)
    shape = shape_for(settings)
    like = LikeJob(pid=pid, command=short_command(argv), reader=stated.reader, settings=settings,
                   gpu_check=check.words, given=tuple(flag.flag for flag in given.values()))
    batch, accum, dtype, compiled = (value_of(settings, name) for name in ("batch_size", "grad_accum", "dtype",
                                                                          "compile"))
    assert isinstance(batch, int) and isinstance(accum, int) and isinstance(dtype, str) and isinstance(compiled, bool)
    return LikePlan(like, shape, model_label(settings, stated.reader), batch, accum, dtype, compiled)


def _job_tree(pid: int) -> tuple[dict[int, int], dict[int, DistEnv]]:
    """({PID as NVML may report it: our PID}, {our PID: its distributed environment}) for the job's whole tree:
    from its launcher when `pid` is a rank, so that every rank's GPU counts."""
    tree = ProcessTreeProbe(resolve_root_safely(pid).root_pid)
    aliases = tree.pid_aliases()
    aliases.setdefault(pid, pid)
    return aliases, {local: read_dist_env(local) for local in set(aliases.values())}


def _gpu_reading(aliases: Mapping[int, int], nvml: Any, device: str) -> GpuReading:
    """One NVML reading with the job's processes marked; none needed for a probe on the CPU."""
    if device.strip().lower() == "cpu":
        return GpuReading(available=False, reason="the probe runs on the CPU")
    return read_once(aliases, nvml)
