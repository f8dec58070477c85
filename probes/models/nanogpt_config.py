"""nanoGPT's shape as the job states it: its command line, read the way nanoGPT's ``configurator.py`` reads
it, and the "number of parameters: 7.24M" line its train.py prints.

nanoGPT's train.py sets its defaults as module globals, then ``exec``s configurator.py, which takes each
argument in turn: one without ``=`` is a config file (``config/train_shakespeare_char.py``) executed over the
globals, one of the form ``--key=value`` overrides a global (the value ``literal_eval``-ed, else a string).
gputop never executes the job's files: a config file's top-level assignments of literal values are read with
``ast``; anything else in it is ignored and said so.

The shape needs a vocabulary size nanoGPT takes from ``data/<dataset>/meta.pkl`` (a pickle, not read here),
else 50304. When the job's log has its parameter count, the vocabulary is solved from it (the count leaves
out the position embeddings and counts the tied lm_head once: N = L·(12·d² + 2·d) + V·d + d without biases).
Tokens per iteration follow train.py: gradient_accumulation_steps × batch_size × block_size (under DDP
train.py divides the accumulation steps among the ranks, so the job's total stays this). The job may be
started by torchrun: train.py is looked for anywhere on the command line. probes/models/job_command_line.py reads
the command line of a running job and asks this reader first.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Sequence
from typing import Any

from probes.models.gpt2 import GptShape, count_params
from probes.models.stated import StatedModel

# nanoGPT train.py's defaults for what the shape and the tokens per iteration depend on.
TRAIN_PY_DEFAULTS = {"n_layer": 12, "n_head": 12, "n_embd": 768, "block_size": 1024, "bias": False,
                     "batch_size": 12, "gradient_accumulation_steps": 5 * 8}
DEFAULT_VOCAB = 50304  # train.py's fallback when data/<dataset>/meta.pkl gives none
PARAMETERS_LINE = re.compile(r"^number of parameters: (\d+(?:\.\d+)?)M\s*$", re.MULTILINE)


def is_nanogpt_train(argv: Sequence[str], cwd: str) -> int | None:
    """The index of nanoGPT's train.py in argv (a train.py with configurator.py beside it), or None."""
    for index, arg in enumerate(argv):  # python [-u] train.py ..., or torchrun [options] train.py ...
        if os.path.basename(arg) == "train.py":
            folder = os.path.dirname(os.path.join(cwd, arg))
            return index if os.path.isfile(os.path.join(folder, "configurator.py")) else None
    return None


def read_command_line(argv: Sequence[str], cwd: str, log_text: str | None = None) -> StatedModel | None:
    """What nanoGPT's train.py would build from this command line, or None when it is not one."""
    script = is_nanogpt_train(argv, cwd)
    if script is None:
        return None
    settings: dict[str, Any] = dict(TRAIN_PY_DEFAULTS)  # any literal a config file or an override sets
    stated = []
    for arg in argv[script + 1:]:
        if "=" not in arg:
            settings.update(_config_file_assignments(os.path.join(cwd, arg)))
            stated.append(arg)
        elif (override := _override(arg)) is not None and override[0] in settings:
            settings[override[0]] = override[1]
            stated.append(arg)
    vocab, vocab_note = DEFAULT_VOCAB, f"vocab {DEFAULT_VOCAB} assumed: data/<dataset>/meta.pkl is not read"
    try:
        shape = GptShape(n_layer=int(settings["n_layer"]), n_head=int(settings["n_head"]),
                         n_embd=int(settings["n_embd"]), block_size=int(settings["block_size"]),
                         vocab_size=vocab, bias=bool(settings["bias"]))
        tokens = int(settings["gradient_accumulation_steps"]) * int(settings["batch_size"]) * shape.block_size
    except (TypeError, ValueError):
        return None
    printed = parameters_printed(log_text)
    if printed is not None:
        solved = _vocab_from_parameters(shape, printed)
        if solved is not None:
            shape = GptShape(**{**shape.__dict__, "vocab_size": solved})
            vocab_note = f"vocab ≈{solved} from its 'number of parameters: {printed / 1e6:.2f}M' line"
    if shape.problem() is not None or tokens < 1:
        return None
    said = " ".join(stated) if stated else "train.py's defaults"
    return StatedModel(shape, "nanoGPT", f"nanoGPT's command line: {said} ({vocab_note})", tokens,
                       "gradient_accumulation_steps × batch_size × block_size on its command line")


def parameters_printed(log_text: str | None) -> int | None:
    """The count in train.py's 'number of parameters: 7.24M' line (to 10,000), or None."""
    match = PARAMETERS_LINE.search(log_text or "")
    return round(float(match.group(1)) * 1e6) if match else None


def _vocab_from_parameters(shape: GptShape, printed: int) -> int | None:
    """The vocabulary that gives the printed count (to its 0.01M rounding), or None if none can."""
    without_vocab = count_params(GptShape(**{**shape.__dict__, "vocab_size": 1})) - shape.n_embd
    vocab = round((printed - without_vocab) / shape.n_embd)
    return vocab if vocab >= 1 else None


def _config_file_assignments(path: str) -> dict[str, object]:
    """Top-level `name = literal` assignments of a nanoGPT config file; {} when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return {}
    found: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:  # an expression of other globals (e.g. batch_size * 2): not followed
                continue
    return found


def configurator_overrides(arguments: Sequence[str]) -> dict[str, object]:
    """Every ``--key=value`` among `arguments` as configurator.py applies it (later ones win), whatever the key:
    what gputop compare reads from a run's recorded command line, where the files are not at hand."""
    return dict(override for arg in arguments if (override := _override(arg)) is not None)


def _override(arg: str) -> tuple[str, object] | None:
    """configurator.py's reading of one ``--key=value`` argument, or None for any other argument."""
    if not arg.startswith("--") or "=" not in arg:
        return None
    key, _, text = arg[2:].partition("=")
    return (key, _literal(text)) if key.isidentifier() else None


def _literal(text: str) -> object:
    """configurator.py's reading of an override's value: a Python literal, else the text itself."""
    try:
        return ast.literal_eval(text)
    except (SyntaxError, ValueError):
        return text
