"""A Hugging Face config.json (a path on this machine; nothing is downloaded) to the shape of the family in
probes.models.FAMILIES that reads its ``model_type``, or one line saying why it cannot be counted; and
``named_shape``, what every ``--model`` means: a preset's name or such a path.
"""

from __future__ import annotations

import json
from typing import Any

from probes.models import FAMILIES, PRESETS, ModelFamily, ModelShape

# Architectures people ask about that no family counts yet, with what is missing.
NOT_SUPPORTED: dict[str, str] = {
    "deepseek_v3": "DeepSeek-V3 is not supported: gputop has no count for multi-head latent attention "
                   "(q/kv LoRA ranks) or for its dense first layers and multi-token prediction",
    "deepseek_v2": "DeepSeek-V2 is not supported: gputop has no count for multi-head latent attention",
    "gemma2": "Gemma 2 is not supported: its extra norms and alternating sliding windows are not counted",
    "gemma3": "Gemma 3 is not supported: its extra norms and alternating sliding windows are not counted",
}


class ModelConfigError(Exception):
    """A config.json that cannot be read or counted; the message is the one line a person sees."""


def family_for_model_type(model_type: str) -> ModelFamily | None:
    for family in FAMILIES:
        if model_type in family.hf_model_types:
            return family
    return None


def shape_from_config(config: dict[str, Any], where: str) -> ModelShape:
    """The shape a parsed config.json describes; ModelConfigError (naming `where`) when none can count it."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str):
        raise ModelConfigError(f"{where} has no model_type: is it a Hugging Face config.json?")
    if model_type in NOT_SUPPORTED:
        raise ModelConfigError(f"{where}: {NOT_SUPPORTED[model_type]}")
    family = family_for_model_type(model_type)
    if family is None:
        readable = ", ".join(t for f in FAMILIES for t in f.hf_model_types)
        raise ModelConfigError(f"{where}: model_type {model_type!r} is not one gputop counts ({readable})")
    try:
        shape = family.from_hf_config(config)
    except KeyError as exc:
        raise ModelConfigError(f"{where}: a {model_type} config needs the field {exc.args[0]}") from None
    except (TypeError, ValueError) as exc:
        raise ModelConfigError(f"{where}: {exc}") from None
    problem = shape.problem()
    if problem:
        raise ModelConfigError(f"{where}: {problem}")
    return shape


def load_config(path: str) -> ModelShape:
    """The shape the config.json at `path` describes; ModelConfigError (one line) for anything else."""
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except OSError as exc:
        raise ModelConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelConfigError(f"{path} is not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ModelConfigError(f"{path} is not a config.json: its top level is not an object")
    return shape_from_config(config, path)


def named_shape(name: str) -> ModelShape:
    """A preset by its name, or the shape of the config.json at that path; ModelConfigError otherwise."""
    if name in PRESETS:
        return PRESETS[name]
    if name.endswith(".json") or "/" in name:
        return load_config(name)
    raise ModelConfigError(f"--model must be a preset ({', '.join(PRESETS)}) or a config.json path (got {name!r})")
