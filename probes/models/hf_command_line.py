"""A Hugging Face config.json that a job's command line names, read for the live pace when the user gives
neither ``--model`` nor ``--baseline`` (probes/jobs/job_command_line.py asks this reader after nanoGPT's).

Training scripts name their model by its folder or its config: transformers' examples and TRL
``--model_name_or_path DIR`` and ``--config_name``, others ``--config PATH.json``, ``--model-dir``, and a
job that saves checkpoints ``--output_dir`` (the config.json written there is the model being trained).
Those flags are looked at first, in the order of ``CONFIG_FLAGS``; then every other argument, so that
``train.py models/llama-tiny`` is found too. An argument counts when it is a folder holding a config.json or
a path to a ``*.json`` file, and the JSON is a Hugging Face config (an object with a ``model_type``) that a
family in probes/models counts; any other JSON (DeepSpeed's ``ds_config.json``) is passed over. A Hub name
(``meta-llama/Meta-Llama-3-8B``) is not a path here and nothing is downloaded: only files are read.

The config's ``max_position_embeddings`` is the longest sequence the model takes, not necessarily the one
it trains at; the attention term grows with it, so a sequence length on the command line (``--block_size``
of transformers' run_clm.py, ``--max_seq_length`` of TRL's SFT, ...) replaces it, and the source says so.

``read_settings`` reads, for ``gputop probe --like PID``, what the command line states beside the model: the sequence
length, ``--per_device_train_batch_size`` (or another micro-batch flag), ``--gradient_accumulation_steps``,
``--bf16`` / ``--fp16`` / ``--mixed_precision`` and ``--torch_compile``. What it does not state is not read: a script's
own defaults are not known here, and the config's longest sequence is not taken for the one it trains at.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

from probes.models.hf_config import ModelConfigError, shape_from_config
from probes.models.stated import StatedModel
from probes.models.stated_settings import SettingName, StatedSetting, StatedSettings

# Flags that name a model folder or config, in the order they are believed: a config given apart from the
# weights (--config_name) is what the script builds; the output folder holds a copy of it at best.
CONFIG_FLAGS = ("config_name", "config", "model_config", "model_dir", "model_name_or_path", "model_path",
                "output_dir")
SEQUENCE_FLAGS = ("block_size", "max_seq_length", "max_seq_len", "seq_length", "seq_len", "max_length")
MAX_CONFIG_BYTES = 1 << 20  # config.json files are a few kB; a larger JSON (tokenizer.json) is not one
# Flags that state the micro-batch (per device) and the accumulation steps, in the order they are believed.
BATCH_FLAGS = ("per_device_train_batch_size", "per_gpu_train_batch_size", "micro_batch_size", "batch_size")
ACCUM_FLAGS = ("gradient_accumulation_steps", "gradient_accumulation", "grad_accum")
PRECISIONS = {"bf16": "bf16", "fp16": "fp16", "no": "fp32", "fp32": "fp32"}  # accelerate's --mixed_precision
TRUE_WORDS, FALSE_WORDS = ("true", "1", "yes"), ("false", "0", "no")


def read_command_line(argv: Sequence[str], cwd: str, log_text: str | None = None) -> StatedModel | None:
    """The shape of the first Hugging Face config.json the command line names (relative paths from `cwd`),
    or None. `log_text` is not needed here (the readers share one signature). Never raises."""
    found = _first_config(argv, cwd)
    if found is None:
        return None
    written, path, shape = found
    shape, sequence_note = _trained_sequence(shape, dict(_options(argv)), argv)
    return StatedModel(shape, path, f"the Hugging Face config.json its command line names: {written} "
                                    f"({path}){sequence_note}")


def _first_config(argv: Sequence[str], cwd: str) -> tuple[str, str, Any] | None:
    """(how the command line names it, its path, its shape) of the first config.json a family counts, or None."""
    for written, path in _candidates(argv, cwd):
        config = _hf_config(path)
        if config is None:
            continue
        try:
            return written, path, shape_from_config(config, path)
        except ModelConfigError:
            continue  # a model no family counts (DeepSeek-V3, ...): look further, else no stated model
    return None


def read_settings(argv: Sequence[str], cwd: str, log_text: str | None = None,
                  world_size: int | None = None) -> StatedSettings | None:
    """The model its command line names and what it states beside it, each setting with the flag it came from, or
    None when it names no config.json. `log_text` and `world_size` are not needed here (one signature for the
    readers): each flag read is per device already."""
    found = _first_config(argv, cwd)
    if found is None:
        return None
    written, path, shape = found
    options = dict(_options(argv))
    field = "seq_len" if hasattr(shape, "seq_len") else "block_size"
    sequence = _integer_flag("block_size", SEQUENCE_FLAGS, options, argv)
    if not sequence.read:
        sequence = StatedSetting("block_size", None, (
            f"its command line states no sequence length (--{', --'.join(SEQUENCE_FLAGS[:3])}, ...); the "
            f"config's {getattr(shape, field)} is the longest it takes, not necessarily the one it trains at"))
    return StatedSettings("a Hugging Face config.json", (
        StatedSetting("model", path, f"{written} on its command line"),
        sequence,
        _integer_flag("batch_size", BATCH_FLAGS, options, argv),
        _integer_flag("grad_accum", ACCUM_FLAGS, options, argv),
        _precision(options, argv),
        _compile(argv),
    ))


def _integer_flag(name: SettingName, flags: Sequence[str], options: dict[str, str],
                  argv: Sequence[str]) -> StatedSetting:
    """The first of `flags` on the command line with a positive whole number."""
    for flag in flags:
        try:
            value = int(options.get(flag, ""))
        except ValueError:
            continue
        if value >= 1:
            return StatedSetting(name, value, f"{_written_flag(argv, flag)} {value} on its command line")
    return StatedSetting(name, None, f"its command line has no --{' or --'.join(flags[:2])}")


def _switch(argv: Sequence[str], name: str) -> tuple[bool, str] | None:
    """A boolean flag (``--bf16``, ``--bf16 True``, ``--bf16=false``) as the command line states it, last one
    winning, with its words; None when absent."""
    found = None
    for index, arg in enumerate(argv):
        flag, equals, text = arg.partition("=")
        if not flag.startswith("--") or flag[2:].replace("-", "_") != name:
            continue
        if not equals and index + 1 < len(argv) and argv[index + 1].lower() in TRUE_WORDS + FALSE_WORDS:
            text, arg = argv[index + 1], f"{arg} {argv[index + 1]}"
        elif not equals:
            text = "true"
        if text.lower() in TRUE_WORDS + FALSE_WORDS:
            found = (text.lower() in TRUE_WORDS, arg)
    return found


def _precision(options: dict[str, str], argv: Sequence[str]) -> StatedSetting:
    """--bf16 or --fp16 (transformers' TrainingArguments), else accelerate's --mixed_precision."""
    bf16, fp16 = _switch(argv, "bf16"), _switch(argv, "fp16")
    for switch, dtype in ((bf16, "bf16"), (fp16, "fp16")):
        if switch is not None and switch[0]:
            return StatedSetting("dtype", dtype, f"{switch[1]} on its command line")
    mixed = options.get("mixed_precision", "").lower()
    if mixed in PRECISIONS:
        return StatedSetting("dtype", PRECISIONS[mixed],
                             f"{_written_flag(argv, 'mixed_precision')} {mixed} on its command line")
    if bf16 is not None and fp16 is not None:  # both stated off
        return StatedSetting("dtype", "fp32", f"{bf16[1]} {fp16[1]} on its command line")
    return StatedSetting("dtype", None, "its command line has no --bf16, --fp16 or --mixed_precision")


def _compile(argv: Sequence[str]) -> StatedSetting:
    switch = _switch(argv, "torch_compile")
    if switch is None:
        return StatedSetting("compile", None, "its command line has no --torch_compile")
    return StatedSetting("compile", switch[0], f"{switch[1]} on its command line")


def _options(argv: Sequence[str]) -> Iterator[tuple[str, str]]:
    """(name, value) of each ``--name value`` or ``--name=value``; the name without dashes, - as _."""
    for index, arg in enumerate(argv):
        if not arg.startswith("--") or arg == "--":
            continue
        name, equals, value = arg[2:].partition("=")
        if not equals:
            if index + 1 >= len(argv) or argv[index + 1].startswith("-"):
                continue  # a switch
            value = argv[index + 1]
        yield name.replace("-", "_"), value


def _candidates(argv: Sequence[str], cwd: str) -> Iterator[tuple[str, str]]:
    """(how the command line says it, the config.json's path) for each argument that names one: the
    CONFIG_FLAGS first, then every argument in order."""
    options = list(_options(argv))
    named = [(f"{_written_flag(argv, name)} {value}", value) for flag in CONFIG_FLAGS
             for name, value in options if name == flag]
    everything = [(arg, arg.partition("=")[2] if arg.startswith("--") else arg) for arg in argv[1:]
                  if not arg.startswith("-") or (arg.startswith("--") and "=" in arg)]
    seen = set()
    for written, value in named + everything:
        path = _config_path(value, cwd)
        if path is not None and path not in seen:
            seen.add(path)
            yield written, path


def _written_flag(argv: Sequence[str], name: str) -> str:
    """The flag as the command line spells it (--model-dir or --model_dir), for the source line."""
    for arg in argv:
        flag = arg.partition("=")[0]
        if flag.startswith("--") and flag[2:].replace("-", "_") == name:
            return flag
    return f"--{name}"


def _config_path(value: str, cwd: str) -> str | None:
    """The config.json `value` names (a folder holding one, or a .json file), absolute; None otherwise."""
    if not value:
        return None
    path = os.path.normpath(os.path.join(cwd, value))
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    elif not path.endswith(".json"):
        return None
    return path if os.path.isfile(path) else None


def _hf_config(path: str) -> dict | None:
    """The JSON object at `path` when it looks like a Hugging Face config (it has a model_type), else None."""
    try:
        if os.path.getsize(path) > MAX_CONFIG_BYTES:
            return None
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError):  # unreadable, not JSON, not UTF-8
        return None
    return config if isinstance(config, dict) and isinstance(config.get("model_type"), str) else None


def _trained_sequence(shape, options: dict[str, str], argv: Sequence[str]):
    """The shape at the sequence length the command line trains at, and a note saying so ("" when none)."""
    field = "seq_len" if hasattr(shape, "seq_len") else "block_size"
    for flag in SEQUENCE_FLAGS:
        try:
            length = int(options.get(flag, ""))
        except ValueError:
            continue
        if length < 1 or length == getattr(shape, field):
            continue
        trained = dataclasses.replace(shape, **{field: length})
        if trained.problem() is None:
            said = f"{_written_flag(argv, flag)} {length}"
            return trained, f"; sequence {length} from {said}, not the config's {getattr(shape, field)}"
    return shape, ""
