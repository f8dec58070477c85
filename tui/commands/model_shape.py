"""What `gputop probe` and `gputop mfu` share: the model options (--model and the shape overrides), the
GptShape they make, and how both reports write large numbers.
"""

from __future__ import annotations

import argparse
import dataclasses

from probes.models import PRESETS
from probes.models.gpt2 import GptShape
from tui.commands.shared import UsageError, positive_int

MODEL_CHOICES = (*PRESETS, "custom")
CUSTOM_DEFAULTS = {"block_size": 1024, "vocab_size": 50304}
SHAPE_FIELDS = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")


def add_model_arguments(parser: argparse.ArgumentParser, default_model: str | None) -> None:
    parser.add_argument("--model", choices=MODEL_CHOICES, default=default_model,
                        help="nanoGPT configuration (vocab 50304, block 1024, no bias), or custom"
                             + (f" (default {default_model})" if default_model else ""))
    shape = parser.add_argument_group("model shape (custom, or overriding a preset)")
    shape.add_argument("--n-layer", type=positive_int, metavar="L")
    shape.add_argument("--n-head", type=positive_int, metavar="H")
    shape.add_argument("--n-embd", type=positive_int, metavar="C")
    shape.add_argument("--block-size", type=positive_int, metavar="T")
    shape.add_argument("--vocab-size", type=positive_int, metavar="V")
    shape.add_argument("--bias", action="store_true", help="biases in Linear and LayerNorm (GPT-2 checkpoints)")


def model_shape(args: argparse.Namespace) -> GptShape:
    """The model shape the arguments ask for; UsageError (one line) when they do not make one."""
    overrides = {name: getattr(args, name) for name in SHAPE_FIELDS if getattr(args, name) is not None}
    if args.model is None:
        raise UsageError("--model is required (a preset, or custom with --n-layer --n-head --n-embd)")
    if args.model == "custom":
        missing = [f"--{name.replace('_', '-')}" for name in ("n_layer", "n_head", "n_embd")
                   if name not in overrides]
        if missing:
            raise UsageError(f"--model custom needs {', '.join(missing)}")
        shape = GptShape(**{**CUSTOM_DEFAULTS, **overrides})
    else:
        shape = dataclasses.replace(PRESETS[args.model], **overrides)
    if args.bias:
        shape = dataclasses.replace(shape, bias=True)
    problem = shape.problem()
    if problem:
        raise UsageError(problem)
    return shape


def scientific(value: float) -> str:
    """1.027e10 rather than Python's 1.027e+10."""
    mantissa, _, exponent = f"{value:.4g}".partition("e")
    return f"{mantissa}e{int(exponent)}" if exponent else mantissa
