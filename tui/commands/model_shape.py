"""What `gputop probe` and `gputop mfu` share: the model options (--model, --config and the shape
overrides), the shape of any family they make, and how both reports write large numbers.
"""

from __future__ import annotations

import argparse
import dataclasses

from probes.models import PRESETS, GptShape, ModelShape
from probes.reference import ModelConfigError, named_shape
from tui.commands.shared import UsageError, positive_int

CUSTOM_DEFAULTS = {"block_size": 1024, "vocab_size": 50304}
GPT_FIELDS = ("n_layer", "n_head", "n_embd", "vocab_size")  # --block-size applies to every family


def add_model_arguments(parser: argparse.ArgumentParser, default_model: str | None) -> None:
    parser.set_defaults(default_model=default_model)  # applied in model_shape, so --config can replace it
    parser.add_argument("--model", metavar="PRESET|custom|config.json",
                        help=f"a preset ({', '.join(PRESETS)}), custom (nanoGPT's GPT from the shape options), "
                             "or a Hugging Face config.json" + (f" (default {default_model})" if default_model else ""))
    parser.add_argument("--config", metavar="config.json",
                        help="a Hugging Face config.json on this machine (Llama, Mistral, Qwen, Gemma, Mixtral, "
                             "Qwen-MoE, GPT-2), instead of --model")
    shape = parser.add_argument_group("model shape (custom, or overriding a preset)")
    shape.add_argument("--n-layer", type=positive_int, metavar="L")
    shape.add_argument("--n-head", type=positive_int, metavar="H")
    shape.add_argument("--n-embd", type=positive_int, metavar="C")
    shape.add_argument("--block-size", type=positive_int, metavar="T",
                       help="tokens per sequence (for a config.json: the length trained at, default its "
                            "max_position_embeddings)")
    shape.add_argument("--vocab-size", type=positive_int, metavar="V")
    shape.add_argument("--bias", action="store_true", help="biases in Linear and LayerNorm (GPT-2 checkpoints)")


def model_shape(args: argparse.Namespace) -> ModelShape:
    """The model shape the arguments ask for; UsageError (one line) when they do not make one."""
    overrides = {name: getattr(args, name) for name in GPT_FIELDS if getattr(args, name) is not None}
    if args.config is not None and args.model is not None:
        raise UsageError("pass --model or --config, not both")
    name = model_label(args)
    if name is None:
        raise UsageError("--model is required (a preset, custom with --n-layer --n-head --n-embd, or a config.json)")
    if name == "custom":
        missing = [f"--{field.replace('_', '-')}" for field in ("n_layer", "n_head", "n_embd")
                   if field not in overrides]
        if missing:
            raise UsageError(f"--model custom needs {', '.join(missing)}")
        shape: ModelShape = GptShape(**{**CUSTOM_DEFAULTS, **overrides})
    else:
        try:
            shape = named_shape(name)
        except ModelConfigError as exc:
            raise UsageError(str(exc)) from None
        if isinstance(shape, GptShape):
            shape = dataclasses.replace(shape, **overrides)
        elif overrides or args.bias:
            flags = [f"--{field.replace('_', '-')}" for field in overrides] + (["--bias"] if args.bias else [])
            raise UsageError(f"only nanoGPT's GPT takes {', '.join(flags)}; edit the config.json for {name}")
    if args.block_size is not None:
        field = "block_size" if isinstance(shape, GptShape) else "seq_len"
        shape = dataclasses.replace(shape, **{field: args.block_size})
    if args.bias and isinstance(shape, GptShape):
        shape = dataclasses.replace(shape, bias=True)
    problem = shape.problem()
    if problem:
        raise UsageError(problem)
    return shape


def model_label(args: argparse.Namespace) -> str | None:
    """What the report calls the model: the preset's name, custom, or the config's path."""
    return args.config or args.model or args.default_model


def scientific(value: float) -> str:
    """1.027e10 rather than Python's 1.027e+10."""
    mantissa, _, exponent = f"{value:.4g}".partition("e")
    return f"{mantissa}e{int(exponent)}" if exponent else mantissa
