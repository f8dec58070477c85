"""`gputop probe --like PID`, the pure part: the job's stated settings (probes/models/stated_settings.py) against the
flags the user gave, the model shape they make, the check that the probe's GPU is none of the job's, and the lines
that say it all before the run. probes/reference/like_job.py reads the job; tui/commands/probe.py runs the probe.

Rules, so that the reference is the job's and nothing in it is guessed:
- a setting the job states is used, and says where it was read;
- a flag given beside --like overrides it, and says so with what the job states;
- a setting the job does not state, and no flag gives, stops the probe with one line naming the flags to pass;
- a probe that would run on a GPU the job uses refuses, naming the GPU, the job's process on it, and another GPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from probes.frame import GpuReading
from probes.jobs.gpus import environment_gpu_index
from probes.models import ModelShape
from probes.models.gpt2 import GptShape
from probes.models.hf_config import ModelConfigError, named_shape
from probes.models.stated_settings import SettingName, StatedSetting, StatedSettings
from probes.sensors.process_facts import DistEnv

# The probe's flag for each setting, as the line asking for a missing one names it.
FLAGS: dict[SettingName, str] = {
    "model": "--model or --config", "n_layer": "--n-layer", "n_head": "--n-head", "n_embd": "--n-embd",
    "vocab_size": "--vocab-size", "bias": "--bias or --no-bias", "block_size": "--block-size",
    "batch_size": "--batch-size", "grad_accum": "--grad-accum", "dtype": "--dtype",
    "compile": "--compile or --no-compile",
}
GPT_FIELDS: tuple[SettingName, ...] = ("n_layer", "n_head", "n_embd", "vocab_size", "bias")
REFUSAL_REASON = "a reference timed beside it measures neither"


class LikeJobError(Exception):
    """Why the probe cannot time the job's step here; the message is the one line the user sees."""


@dataclass(frozen=True)
class Given:
    """A flag the user gave beside --like: its value as the probe takes it and how it was written."""

    value: int | bool | str
    flag: str  # "--batch-size 4", "--no-compile", "--model gpt2-xl"


@dataclass(frozen=True)
class LikeJob:
    """What `gputop probe --like PID` timed: each setting as the probe used it and where it came from (the job, or a
    flag given), and what was checked about the GPUs; in the probe's result (its JSON's "like")."""

    pid: int
    command: str  # the job's command line, shortened
    reader: str  # how the job was read: "nanoGPT's train.py", "a Hugging Face config.json"
    settings: tuple[StatedSetting, ...]
    gpu_check: str  # the job's GPUs and the probe's, or why they were not compared
    given: tuple[str, ...] = ()  # the flags given beside --like, as written ("--batch-size 4", "--no-compile")


@dataclass(frozen=True)
class GpuCheck:
    """The probe's GPU against the job's: `refusal` the one line when they are the same, `words` what was checked."""

    refusal: str | None
    words: str


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def resolve(pid: int, stated: StatedSettings, given: Mapping[SettingName, Given]) -> tuple[StatedSetting, ...]:
    """The settings the probe runs with: the job's, each flag given in place of the job's; LikeJobError (one line)
    naming the flags to pass for any the job does not state and no flag gives."""
    settings = list(stated.settings)
    if "model" in given:  # a model named by flag replaces the job's whole model: its config, or nanoGPT's fields
        job_model = stated.get("model") or StatedSetting("model", None, "")
        settings = [job_model] + [s for s in settings if s.name not in GPT_FIELDS and s.name != "model"]
    for name in given:
        if all(s.name != name for s in settings):
            settings.insert(0 if name == "model" else len(settings), StatedSetting(name, None, ""))
    resolved = []
    for setting in settings:
        if setting.name not in given:
            resolved.append(setting)
            continue
        flag = given[setting.name]
        job = (f"{_shown(setting.value)}, {setting.source}" if setting.read
               else f"not read: {setting.source}" if setting.source else "")
        resolved.append(StatedSetting(setting.name, flag.value, f"{flag.flag} given"
                                                                + (f" (the job's: {job})" if job else "")))
    missing = [s for s in resolved if not s.read]
    if missing:
        reasons = "; ".join(s.source if s.source.startswith(s.name) else f"{s.name}: {s.source}" for s in missing)
        flags = ", ".join(FLAGS[s.name] for s in missing)
        raise LikeJobError(f"cannot time PID {pid}'s step at its own settings: {reasons}. Pass {flags}")
    return tuple(resolved)


def value_of(settings: tuple[StatedSetting, ...], name: SettingName) -> int | bool | str:
    """The value of a resolved setting (resolve() left none unread)."""
    value = next(s.value for s in settings if s.name == name)
    assert value is not None
    return value


def shape_for(settings: tuple[StatedSetting, ...]) -> ModelShape:
    """The model the settings make: a named model (a config.json the job names, or a --model/--config given) at
    the job's sequence length, or nanoGPT's GPT from its fields; LikeJobError (one line) when they make none."""
    names = {s.name for s in settings}
    block = value_of(settings, "block_size")
    assert isinstance(block, int)
    if "model" in names:
        model = value_of(settings, "model")
        try:
            shape = named_shape(str(model))
        except ModelConfigError as exc:  # a preset that is none, a config.json gone or not counted: one line
            raise LikeJobError(str(exc)) from None
        overrides = {name: value_of(settings, name) for name in GPT_FIELDS if name in names}
        if overrides and not isinstance(shape, GptShape):
            flags = ", ".join(FLAGS[name] for name in overrides)
            raise LikeJobError(f"only nanoGPT's GPT takes {flags}; edit the config.json of {model}")
        field = "seq_len" if hasattr(shape, "seq_len") else "block_size"
        shape = dataclasses.replace(shape, **overrides, **{field: block})
    else:
        fields = {name: value_of(settings, name) for name in GPT_FIELDS}
        shape = GptShape(block_size=block, **fields)  # type: ignore[arg-type]
    problem = shape.problem()
    if problem:
        raise LikeJobError(f"the job's settings make no model the probe can build: {problem}")
    return shape


def model_label(settings: tuple[StatedSetting, ...], reader: str) -> str:
    """What the report calls the model: the one named (a preset, a config.json's path), else nanoGPT."""
    named = next((s.value for s in settings if s.name == "model"), None)
    return str(named) if named is not None else ("nanoGPT" if reader.startswith("nanoGPT") else reader)


def check_gpus(reading: GpuReading, environments: Mapping[int, DistEnv], pid: int, device: str,
               own_cuda_visible_devices: str | None) -> GpuCheck:
    """Whether the probe (--device `device`, under gputop's own CUDA_VISIBLE_DEVICES) would run on a GPU the job
    uses: one NVML lists a process of the job's tree on (`reading` read with the tree's PIDs), or one a process's
    environment points it at (`environments`: each process of the job's tree)."""
    requested = device.strip().lower()
    if requested == "cpu":
        return GpuCheck(None, "the probe runs on the CPU (--device cpu)")
    position_text = requested.partition(":")[2] if requested.startswith("cuda") else ""
    names_a_gpu = requested == "auto" or requested.startswith("cuda")
    if not names_a_gpu or (position_text and not position_text.isdigit()):
        return GpuCheck(None, f"not checked: --device {device} names no GPU gputop can place")
    holders = _job_gpus(reading, environments, pid)
    probe = environment_gpu_index(own_cuda_visible_devices, int(position_text or 0), reading)
    own = f" (CUDA_VISIBLE_DEVICES={own_cuda_visible_devices})" if own_cuda_visible_devices is not None else ""
    if probe is not None and probe in holders:
        return GpuCheck(f"GPU {probe} is {holders[probe]}: {REFUSAL_REASON}; {_advice(reading, holders)}",
                        f"GPU {probe} is the job's")
    jobs = ", ".join(str(index) for index in sorted(holders))
    job_words = f"the job's GPU{'s' if len(holders) > 1 else ''}: {jobs}" if holders else (
        "the job holds no GPU that NVML lists or its environment names" if reading.available
        else f"the job's GPUs not read ({reading.reason})")
    if probe is None:
        if not reading.available and own_cuda_visible_devices is None:
            return GpuCheck(None, f"GPUs not checked: {reading.reason}")
        return GpuCheck(None, f"{job_words}; which GPU the probe gets is not known{own}: not compared")
    return GpuCheck(None, f"{job_words}; the probe's: GPU {probe}{own}")


def _job_gpus(reading: GpuReading, environments: Mapping[int, DistEnv], pid: int) -> dict[int, str]:
    """{NVML index: how the job holds it, in words} for each GPU the job uses."""
    holders: dict[int, str] = {}
    if reading.available:
        for gpu in reading.devices:
            pids = sorted({p.local_pid or p.pid for p in gpu.processes if p.in_target})
            if pids:
                named = ", ".join(str(p) for p in pids[:3])
                whose = "the job" if pid in pids else f"the job of PID {pid}"
                holders[gpu.index] = f"running PID {named} ({whose})"
    for process, env in sorted(environments.items()):
        visible = env.cuda_visible_devices
        if env.rank is not None:  # a rank uses one GPU: its LOCAL_RANK-th visible one
            indices = [environment_gpu_index(visible, env.local_rank, reading)]
            said = (f"CUDA_VISIBLE_DEVICES={visible}, LOCAL_RANK={env.local_rank}" if visible is not None
                    else f"LOCAL_RANK={env.local_rank}")
        elif visible is not None:  # a process that is no rank may use every GPU it sees
            entries = [e.strip() for e in visible.split(",") if e.strip()]
            indices = [environment_gpu_index(entry, None, reading) for entry in entries]
            said = f"CUDA_VISIBLE_DEVICES={visible}"
        else:
            continue
        for index in indices:
            if index is not None and index not in holders:
                holders[index] = f"the job's: PID {process}'s environment sets {said}"
    return holders


def _advice(reading: GpuReading, holders: Mapping[int, str]) -> str:
    """Stop the job, or run the probe on a GPU the job does not use (an idle one first)."""
    others = [gpu for gpu in reading.devices if gpu.index not in holders] if reading.available else []
    if not reading.available:
        return "stop the job or set CUDA_VISIBLE_DEVICES to a GPU it does not use"
    if not others:
        return "stop the job: it uses every GPU NVML lists here"
    idle = [gpu for gpu in others if not gpu.processes]
    return f"stop the job or pass CUDA_VISIBLE_DEVICES={(idle or others)[0].index}"


def setting_lines(like: LikeJob) -> list[str]:
    """What the probe will be like, before it runs: the job, then each setting with where it came from."""
    lines = [f"like PID {like.pid} ({like.command}), read as {like.reader}:"]
    lines += [f"  {s.name:<11} {_shown(s.value):<8} {s.source}" for s in like.settings]
    lines.append(f"  {'GPU check':<11} {like.gpu_check}")
    return lines
