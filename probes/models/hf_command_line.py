"""A Hugging Face config.json that a job's command line names, read for the live pace when the user gives
neither ``--model`` nor ``--baseline`` (probes/models/job_command_line.py asks this reader after nanoGPT's).

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
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator, Sequence

from probes.models.hf_config import ModelConfigError, shape_from_config
from probes.models.stated import StatedModel

# Flags that name a model folder or config, in the order they are believed: a config given apart from the
# weights (--config_name) is what the script builds; the output folder holds a copy of it at best.
CONFIG_FLAGS = ("config_name", "config", "model_config", "model_dir", "model_name_or_path", "model_path",
                "output_dir")
SEQUENCE_FLAGS = ("block_size", "max_seq_length", "max_seq_len", "seq_length", "seq_len", "max_length")
MAX_CONFIG_BYTES = 1 << 20  # config.json files are a few kB; a larger JSON (tokenizer.json) is not one


def read_command_line(argv: Sequence[str], cwd: str, log_text: str | None = None) -> StatedModel | None:
    """The shape of the first Hugging Face config.json the command line names (relative paths from `cwd`),
    or None. `log_text` is not needed here (the readers share one signature). Never raises."""
    options = dict(_options(argv))
    for written, path in _candidates(argv, cwd):
        config = _hf_config(path)
        if config is None:
            continue
        try:
            shape = shape_from_config(config, path)
        except ModelConfigError:
            continue  # a model no family counts (DeepSeek-V3, ...): look further, else no stated model
        shape, sequence_note = _trained_sequence(shape, options, argv)
        return StatedModel(shape, path, f"the Hugging Face config.json its command line names: {written} "
                                        f"({path}){sequence_note}")
    return None


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
