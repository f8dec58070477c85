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
started by torchrun: train.py is looked for anywhere on the command line. probes/jobs/job_command_line.py reads
the command line of a running job and asks this reader first.

``read_settings`` reads, for ``gputop probe --like PID``, every setting the probe's step depends on, each with where
it was set: train.py's own assignments before it runs configurator.py (nanoGPT's ``gradient_accumulation_steps = 5 *
8`` and ``dtype = 'bfloat16' if ... is_bf16_supported() else 'float16'`` included), then each config file, then each
override. A name bound in a way gputop does not follow (an expression of other names, inside an ``if``) is not read,
and says where; so is the shape of ``init_from='resume'`` (a checkpoint, not opened) and a vocabulary in a
``meta.pkl`` (a pickle, not opened) that the log's parameter count does not give.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Sequence
from typing import Any

from probes.models.gpt2 import GptShape, count_params
from probes.models.stated import StatedModel
from probes.models.stated_settings import SettingName, StatedSetting, StatedSettings

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
    """Top-level `name = value` assignments of a nanoGPT config file, values as `_evaluate` reads them (literals
    and arithmetic on numbers, as `gputop probe --like` reads the same file); {} when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return {}
    found: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _evaluate(node.value)
            # An expression of other globals (batch_size * 2) is not followed, nor a dtype that depends on the GPU.
            if value is not _NOT_EVALUATED and value is not _BF16_WHERE_SUPPORTED:
                found[node.targets[0].id] = value
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


# --- every setting the probe's step depends on, for `gputop probe --like PID` ------------------------------------

# The names train.py binds (and configurator.py lets a config file or an override rebind) that the step depends on.
SETTING_NAMES = frozenset({"n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size", "batch_size",
                           "gradient_accumulation_steps", "dtype", "compile", "device", "init_from", "dataset"})
# GPT.from_pretrained's shapes for init_from='gpt2*': OpenAI's vocabulary, biases, 1024 positions.
PRETRAINED_SHAPES = {"gpt2": (12, 12, 768), "gpt2-medium": (24, 16, 1024), "gpt2-large": (36, 20, 1280),
                     "gpt2-xl": (48, 25, 1600)}
PRETRAINED_VOCAB, PRETRAINED_BLOCK = 50257, 1024
TRAIN_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}  # train.py's ptdtype keys
_ARITHMETIC = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.FloorDiv: lambda a, b: a // b, ast.Div: lambda a, b: a / b}
# Scopes of their own: a name bound inside one is not a global configurator.py or train.py sees.
_OWN_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp,
               ast.DictComp, ast.GeneratorExp)
_WHERE_CHARS = 90  # a source line longer than this is cut


class _Bf16WhereSupported:
    """nanoGPT's ``dtype = 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else
    'float16'``: the probe's --dtype auto on a GPU."""


_BF16_WHERE_SUPPORTED = _Bf16WhereSupported()
# What a name is bound to where gputop does not read its value, each with the words that follow where it was bound.
_NOT_EVALUATED = object()  # an expression of other names or calls
_NOT_FOLLOWED = object()  # a binding inside a statement (an if, a loop, an import)
_UNREADABLE = object()  # a config file that could not be read: it may set anything
_UNREAD_WORDS = {id(_NOT_EVALUATED): ", an expression gputop does not evaluate",
                 id(_NOT_FOLLOWED): ", inside a statement gputop does not follow", id(_UNREADABLE): ""}


def read_settings(argv: Sequence[str], cwd: str, log_text: str | None = None,
                  world_size: int | None = None) -> StatedSettings | None:
    """What nanoGPT's train.py trains with, setting by setting with where each was set, or None when the command line
    is not nanoGPT's. `world_size`: the ranks' WORLD_SIZE (train.py divides the accumulation steps among them)."""
    script = is_nanogpt_train(argv, cwd)
    if script is None:
        return None
    train = argv[script]
    bound: dict[str, tuple[object, str]] = {}  # name -> (value or why it is not read, where it was set)
    bound.update(_bindings(os.path.join(cwd, train), train, before_configurator=True))
    for arg in argv[script + 1:]:
        if "=" not in arg:  # configurator.py execs it as a config file
            bound.update(_bindings(os.path.join(cwd, arg), arg, before_configurator=False))
        elif (override := _override(arg)) is not None and override[0] in SETTING_NAMES:
            bound[override[0]] = (override[1], f"{arg} on its command line")
    reading = _SettingsReading(bound, train, cwd)
    shape = reading.shape(log_text)
    return StatedSettings("nanoGPT's train.py", (
        *shape, reading.block_size(), reading.integer("batch_size", "batch_size"), reading.grad_accum(world_size),
        reading.dtype(), reading.boolean("compile")))


class _SettingsReading:
    """The bound names of one command line turned into the probe's settings."""

    def __init__(self, bound: dict[str, tuple[object, str]], train: str, cwd: str) -> None:
        self.bound = bound
        self.train = train
        self.cwd = cwd

    def _value(self, key: str) -> tuple[object, str | None, str]:
        """(value, None, where) when `key` is set to a value gputop read; (None, why not, where) otherwise."""
        if key not in self.bound:
            return None, f"{key} is not set in {self.train}, a config file or an override", ""
        value, where = self.bound[key]
        if id(value) in _UNREAD_WORDS:
            return None, where + _UNREAD_WORDS[id(value)], where
        return value, None, where

    def integer(self, name: SettingName, key: str) -> StatedSetting:
        value, why, where = self._value(key)
        if why is not None:
            return StatedSetting(name, None, why)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return StatedSetting(name, None, f"{where}, not a positive whole number")
        return StatedSetting(name, value, where)

    def boolean(self, name: SettingName) -> StatedSetting:
        value, why, where = self._value(name)
        if why is not None:
            return StatedSetting(name, None, why)
        if not isinstance(value, bool):
            return StatedSetting(name, None, f"{where}, not True or False")
        return StatedSetting(name, value, where)

    def _init_from(self) -> tuple[str | None, str | None, str]:
        """(train.py's init_from, None, where); 'scratch' when nothing sets it (the shape is then the globals');
        (None, why not, where) when it cannot be read."""
        if "init_from" not in self.bound:
            return "scratch", None, ""
        value, why, where = self._value("init_from")
        if why is not None:
            return None, why, where
        return (str(value), None, where) if isinstance(value, str) else (None, f"{where}, not a string", where)

    def shape(self, log_text: str | None) -> tuple[StatedSetting, ...]:
        """n_layer, n_head, n_embd, vocab_size, bias, as train.py builds its model."""
        init, why, where = self._init_from()
        names: tuple[SettingName, ...] = ("n_layer", "n_head", "n_embd", "vocab_size", "bias")
        if init in PRETRAINED_SHAPES:
            said = f"{where}: GPT.from_pretrained's {init} shape"
            values = (*PRETRAINED_SHAPES[init], PRETRAINED_VOCAB, True)
            return tuple(StatedSetting(name, value, said) for name, value in zip(names, values, strict=True))
        if init != "scratch":
            reason = why or (f"{where}: the shape comes from the checkpoint in out_dir (ckpt.pt), which gputop does "
                             "not open" if init == "resume" else f"{where}: not a shape train.py builds")
            return tuple(StatedSetting(name, None, reason) for name in names)
        dims = (self.integer("n_layer", "n_layer"), self.integer("n_head", "n_head"), self.integer("n_embd", "n_embd"))
        bias = self.boolean("bias")
        return (*dims, self._vocab(dims, bias, log_text), bias)

    def _vocab(self, dims: tuple[StatedSetting, ...], bias: StatedSetting, log_text: str | None) -> StatedSetting:
        """A vocab_size the job sets itself; else train.py's: data/<dataset>/meta.pkl's (a pickle: only through
        the log's parameter count), else 50304."""
        if "vocab_size" in self.bound:  # not a nanoGPT global: a train.py that has one builds its model with it
            return self.integer("vocab_size", "vocab_size")
        printed = parameters_printed(log_text)
        solved = None
        n_layer, n_head, n_embd = (d.value for d in dims)
        if (printed is not None and isinstance(n_layer, int) and isinstance(n_head, int) and isinstance(n_embd, int)
                and isinstance(bias.value, bool)):
            solved = _vocab_from_parameters(GptShape(n_layer, n_head, n_embd, 1024, 1, bias.value), printed)
        from_log = f"≈{solved} from its log's 'number of parameters: {(printed or 0) / 1e6:.2f}M' line"
        dataset, why, where = self._value("dataset")
        if why is None and isinstance(dataset, str):
            meta = os.path.join("data", dataset, "meta.pkl")
            if not os.path.exists(os.path.join(self.cwd, meta)):
                return StatedSetting("vocab_size", DEFAULT_VOCAB, f"train.py's {DEFAULT_VOCAB}: {meta} does not exist "
                                                                  f"(dataset from {where})")
            if solved is not None:
                return StatedSetting("vocab_size", solved, f"{from_log} ({meta}, a pickle, is not opened)")
            return StatedSetting("vocab_size", None, f"{meta} holds it, a pickle gputop does not open, and its log "
                                                     "has no 'number of parameters' line")
        if solved is not None:
            return StatedSetting("vocab_size", solved, from_log)
        return StatedSetting("vocab_size", None, "train.py takes it from data/<dataset>/meta.pkl, and "
                                                 + (why if why is not None else f"{where}, not a string"))

    def block_size(self) -> StatedSetting:
        block = self.integer("block_size", "block_size")
        init, _, where = self._init_from()
        if init in PRETRAINED_SHAPES and isinstance(block.value, int) and block.value > PRETRAINED_BLOCK:
            return StatedSetting("block_size", PRETRAINED_BLOCK, f"{where}: {init}'s {PRETRAINED_BLOCK} positions")
        if init == "resume":
            return StatedSetting("block_size", None, f"{where}: the checkpoint's block size (ckpt.pt, not opened) "
                                                     "unless block_size crops it")
        return block

    def grad_accum(self, world_size: int | None) -> StatedSetting:
        steps = self.integer("grad_accum", "gradient_accumulation_steps")
        total = steps.value
        if not isinstance(total, int) or not world_size or world_size < 2:
            return steps
        if total % world_size:
            return StatedSetting("grad_accum", None, f"{steps.source}: train.py asserts it divides by the "
                                                     f"{world_size} ranks (WORLD_SIZE), and it does not")
        return StatedSetting("grad_accum", total // world_size,
                             f"{steps.source}, ÷ {world_size} ranks: train.py divides it by WORLD_SIZE under DDP")

    def dtype(self) -> StatedSetting:
        if "device" in self.bound:
            device, why, where = self._value("device")
            if why is not None:
                return StatedSetting("dtype", None, f"train.py runs fp32 on the CPU, and {why}")
            if isinstance(device, str) and "cuda" not in device:  # train.py's device_type
                return StatedSetting("dtype", "fp32", f"{where}: train.py runs there without autocast, in fp32")
        value, why, where = self._value("dtype")
        if why is not None:
            return StatedSetting("dtype", None, why)
        if value is _BF16_WHERE_SUPPORTED:
            return StatedSetting("dtype", "auto", f"{where} (bf16 where the GPU has it, else fp16)")
        if isinstance(value, str) and value in TRAIN_DTYPES:
            return StatedSetting("dtype", TRAIN_DTYPES[value], where)
        return StatedSetting("dtype", None, f"{where}, not one of train.py's {', '.join(TRAIN_DTYPES)}")


def _bindings(path: str, label: str, before_configurator: bool) -> dict[str, tuple[object, str]]:
    """{name: (value, where)} for each SETTING_NAMES name the file at `path` binds in its global scope, later
    bindings winning, the value _NOT_EVALUATED or _NOT_FOLLOWED where gputop does not read it; only the statements
    before configurator.py runs when `before_configurator`. A file that cannot be read binds every name to
    _UNREADABLE (configurator.py would execute whatever it holds)."""
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=path)
    except (OSError, SyntaxError, ValueError) as exc:
        why = f"{label} could not be read ({getattr(exc, 'strerror', None) or type(exc).__name__})"
        return {name: (_UNREADABLE, why) for name in SETTING_NAMES}
    statements = tree.body
    if before_configurator:  # train.py: its defaults end where it execs configurator.py
        end = next((i for i, node in enumerate(statements) if "configurator" in ast.unparse(node)), len(statements))
        statements = statements[:end]
    found: dict[str, tuple[object, str]] = {}
    for statement in statements:
        if isinstance(statement, _OWN_SCOPES):  # a def or class binds its own name, nothing inside it
            continue
        names = SETTING_NAMES.intersection(_stored_names(statement))
        simple = (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                  and isinstance(statement.targets[0], ast.Name))
        for name in names:
            if simple:
                assert isinstance(statement, ast.Assign)
                found[name] = (_evaluate(statement.value), _cut(f"{label}: {ast.unparse(statement)}"))
            else:
                text = ast.unparse(statement).splitlines()[0]
                found[name] = (_NOT_FOLLOWED, _cut(f"{label} line {statement.lineno}: {text}"))
    return found


def _stored_names(node: ast.AST):
    """Every name `node` binds in the module's scope (assignments, loops, with, imports), not looking inside
    functions, classes, lambdas or comprehensions."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        yield node.id
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        for alias in node.names:
            yield (alias.asname or alias.name).partition(".")[0]
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, _OWN_SCOPES):
            yield from _stored_names(child)


def _evaluate(node: ast.expr) -> object:
    """A literal, arithmetic on numbers (nanoGPT's ``5 * 8``) or nanoGPT's bf16-where-supported dtype; else
    _NOT_EVALUATED. Nothing is executed."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = _evaluate(node.left), _evaluate(node.right)
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (left, right))
        if numbers and not (isinstance(node.op, (ast.Div, ast.FloorDiv)) and right == 0):
            return _ARITHMETIC[type(node.op)](left, right)
    if (isinstance(node, ast.IfExp) and isinstance(node.body, ast.Constant) and node.body.value == "bfloat16"
            and isinstance(node.orelse, ast.Constant) and node.orelse.value == "float16"
            and "is_bf16_supported" in ast.unparse(node.test)):
        return _BF16_WHERE_SUPPORTED
    return _NOT_EVALUATED


def _cut(text: str) -> str:
    return text if len(text) <= _WHERE_CHARS else text[:_WHERE_CHARS - 1] + "…"
