"""What one sampled stack says about how the training step is written (StackMarks): compiled or eager code, the
attention's implementation, autocast, the GradScaler, activation checkpointing, the optimizer's implementation,
host synchronisations, pinned memory and non-blocking copies. step_facts.py sums these over the look-back.

Each mark says where it was read: a frame of the stack ("stacks"), or the source line py-spy names for a frame, read
from this machine's disk ("source", probes/sensors/source_lines.py). A C call such as `.item()`,
F.scaled_dot_product_attention or `.to(device, non_blocking=True)` has no Python frame of its own: its line does.
py-spy's --locals is not used, so a setting held in a variable (`with ctx:`, `enabled=use_amp`) stays unknown.
Marks are memoised per stack, as classify_cached is: the same stacks come back tick after tick.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from probes.diagnosis.stacks import (
    COMPILE,
    classify_cached,
    describe,
    is_generated_code,
    is_library,
    runs_compiled_code,
    short_path,
)
from probes.frame import StackFrame
from probes.lru import LruCache
from probes.sampling.stacks import frame_matches
from probes.sensors import source_lines

# Where a fact was read: a frame of the sampled stacks, the source line a frame names, the code torch.compile
# generated (its file, named by a frame), the job's command line, NVML.
Origin = Literal["stacks", "source", "generated code", "command line", "NVML"]


@dataclass(frozen=True)
class Mark:
    """One thing a stack shows: its value (a word of the fact's vocabulary) and where it was read."""

    value: str
    origin: Origin
    where: str


# torch.compile's entry into a compiled module or function (not torch's own @torch._dynamo.disable wrappers, which
# share eval_frame.py: DisableContext).
_DYNAMO_ENTRY = (("OptimizedModule.__call__", "torch/_dynamo/eval_frame.py"),)
_DYNAMO_WRAPPER = "compile_wrapper"  # _TorchDynamoContext.__call__.<locals>.compile_wrapper (torch 2.6+)
_MODULE_CALL = ("Module._call_impl", "torch/nn/modules/module.py")

# Attention whose implementation a frame names: Hugging Face's attention functions, flash-attn, xformers.
_ATTENTION_FRAMES = (
    ("sdpa", "sdpa_attention_forward", "transformers/integrations/sdpa_attention.py"),
    ("flash_attn", "flash_attention_forward", "transformers/integrations/flash_attention.py"),
    ("by_hand", "eager_attention_forward", None),  # transformers/models/<model>/modeling_<model>.py
)
_ATTENTION_FILES = (("flash_attn", "/flash_attn/"), ("xformers", "/xformers/ops/fmha/"))
_ATTENTION_NAME = re.compile(r"attn|attention", re.IGNORECASE)
_SDPA_CALL = re.compile(r"\bscaled_dot_product_attention\s*\(")
_BY_HAND_CALL = re.compile(r"\bsoftmax\s*\(|\.masked_fill_?\s*\(|\bmatmul\s*\(|\bbmm\s*\(|\beinsum\s*\(|\s@\s")
_FUNCTIONAL = "torch/nn/functional.py"

_AUTOCAST_CALL = re.compile(r"\bautocast\s*\(")
_AUTOCAST_DTYPE = re.compile(r"dtype\s*=\s*torch\.(bfloat16|float16|half)\b")
_AUTOCAST_OFF = re.compile(r"\benabled\s*=\s*(?!True\b)")  # enabled=<a variable or False>: not read
_AUTOCAST_NATIVE = "autocast::"  # at::autocast::WrapFunction_…: runs only while autocast is on

_SCALER_FILES = ("torch/amp/grad_scaler.py", "torch/cuda/amp/grad_scaler.py", "torch/cpu/amp/grad_scaler.py")
_SCALER_ENABLED_ONLY = ("_maybe_opt_step", "_unscale_grads_", "_check_inf_per_device")

_CHECKPOINT_FILES = (
    "torch/utils/checkpoint.py",
    "deepspeed/runtime/activation_checkpointing/",
    "megatron/core/tensor_parallel/random.py",
)
# Beneath these the checkpointed forward runs again, inside backward.
_RECOMPUTE = re.compile(r"recompute_fn|unpack_hook|CheckpointFunction\.backward")

_TORCH_OPTIMIZER = re.compile(r"^_(fused|multi_tensor|single_tensor)_(\w+)$")
_OPTIMIZER_KINDS = {"fused": "fused", "multi_tensor": "foreach", "single_tensor": "per_parameter"}
_FUSED_OPTIMIZER_FILES = ("apex/optimizers/fused_", "deepspeed/ops/adam/fused_adam.py")

# A line of the user's own code that copies a tensor to the host (the thread waits for the GPU there).
_SYNC_CALLS = (("item", re.compile(r"\.item\(\s*\)")), ("cpu", re.compile(r"\.cpu\(\s*\)")),
               ("tolist", re.compile(r"\.tolist\(\s*\)")), ("numpy", re.compile(r"\.numpy\(\s*\)")),
               ("synchronize", re.compile(r"\bcuda\.synchronize\s*\(")))
_SYNC_FRAMES = (
    ("synchronize", "synchronize", "torch/cuda/__init__.py"),
    ("synchronize", "Event.synchronize", "torch/cuda/streams.py"),
    ("synchronize", "Stream.synchronize", "torch/cuda/streams.py"),
    ("print", "Tensor.__format__", "torch/_tensor.py"),
    ("print", "Tensor.__repr__", "torch/_tensor.py"),
)
_TENSOR_STR = "torch/_tensor_str.py"  # printing a tensor copies its values to the host
_SYNC_NATIVE = (("item", "_local_scalar_dense"), ("cpu", "cuMemcpyDtoH"))

_PIN_MEMORY_FILE = "torch/utils/data/_utils/pin_memory.py"
_PIN_CALL = re.compile(r"\.pin_memory\(\s*\)")
_NON_BLOCKING = re.compile(r"\bnon_blocking\s*=\s*True\b")


@dataclass(frozen=True)
class StackMarks:
    """What one stack shows of the step's make-up; None where it shows nothing of that kind."""

    compiled: Mark | None = None  # runs torch.compile's compiled code, enters it, or compiles
    eager_module: Mark | None = None  # runs an nn.Module's forward outside any compiled code: the outermost one
    generated_files: tuple[str, ...] = ()  # files of torch.compile's generated code it runs
    attention: Mark | None = None
    autocast: Mark | None = None
    grad_scaler: Mark | None = None
    checkpointing: Mark | None = None
    recomputing: bool = False  # a checkpointed forward run again inside backward
    optimizer: Mark | None = None
    host_sync: Mark | None = None
    pin_memory: Mark | None = None
    non_blocking: Mark | None = None
    # The user's file py-spy named for its innermost frame where it could not be read here (a replay elsewhere,
    # a job in another container): a line that might have said more.
    unread_file: str | None = None


def _python(frames: Sequence[StackFrame]) -> tuple[StackFrame, ...]:
    return tuple(f for f in frames if not f.native)


def _in(frame: StackFrame, fragments: Sequence[str]) -> bool:
    return any(fragment in frame.file for fragment in fragments)


def _base(function: str) -> str:
    return function.rsplit(".", 1)[-1]


def _compiled(frames: Sequence[StackFrame]) -> Mark | None:
    if classify_cached(tuple(frames), False).activity == COMPILE:
        return Mark("compiled", "stacks", "torch.compile compiling")
    if runs_compiled_code(frames):
        shown = next((f for f in frames if is_generated_code(f)), None) or next(
            (f for f in frames if f.file.endswith(("output_code.py", "runtime_wrappers.py"))), frames[0])
        return Mark("compiled", "stacks", describe(shown))
    entry = next((f for f in frames if any(frame_matches(f, *m) for m in _DYNAMO_ENTRY)
                  or (_DYNAMO_WRAPPER in f.function and f.file.endswith("torch/_dynamo/eval_frame.py"))), None)
    return Mark("compiled", "stacks", describe(entry)) if entry is not None else None


def _eager_module(python: tuple[StackFrame, ...]) -> Mark | None:
    """The outermost nn.Module forward of a stack that runs no compiled code (the model's, as a rule)."""
    calls = [i for i, f in enumerate(python) if frame_matches(f, *_MODULE_CALL)]
    if not calls:
        return None
    outermost = calls[-1]
    forward = next((f for f in reversed(python[:outermost]) if not f.file.endswith("torch/nn/modules/module.py")),
                   python[outermost])
    return Mark("eager", "stacks", describe(forward))


def _attention(python: tuple[StackFrame, ...]) -> Mark | None:
    for frame in python:
        for value, function, suffix in _ATTENTION_FRAMES:
            if frame_matches(frame, function, suffix) and (suffix is not None or "transformers/models/" in frame.file):
                return Mark(value, "stacks", describe(frame))
        for value, fragment in _ATTENTION_FILES:
            if fragment in frame.file:
                return Mark(value, "stacks", describe(frame))
    if python and _base(python[0].function) == "softmax" and python[0].file.endswith(_FUNCTIONAL):
        caller = python[1] if len(python) > 1 else None
        if caller is not None and _ATTENTION_NAME.search(caller.function):
            return Mark("by_hand", "stacks", f"{describe(python[0])} called from {describe(caller)}")
    if not python:
        return None
    innermost = python[0]
    text = source_lines.line_in(innermost.file, innermost.line, innermost.function)
    if text is None:
        return None
    if _SDPA_CALL.search(text):
        return Mark("sdpa", "source", f"{describe(innermost)} calls scaled_dot_product_attention")
    if _ATTENTION_NAME.search(innermost.function) and _BY_HAND_CALL.search(text):
        return Mark("by_hand", "source", f"{describe(innermost)}: {_by_hand_words(text)}")
    return None


def _by_hand_words(text: str) -> str:
    found = [name for name, pattern in (("softmax", r"softmax\s*\("), ("masked_fill", r"masked_fill"),
                                        ("a matmul", r"matmul\s*\(|\bbmm\s*\(|\s@\s"), ("einsum", r"einsum\s*\("))
             if re.search(pattern, text)]
    return " and ".join(found) + " written out"


def _autocast(frames: Sequence[StackFrame], python: tuple[StackFrame, ...]) -> Mark | None:
    native = next((f for f in frames if f.native and _AUTOCAST_NATIVE in f.function), None)
    if native is not None:
        return Mark("on", "stacks", f"native frame {native.function}")
    for frame in python:
        if is_library(frame):
            continue
        for line, text in source_lines.enclosing_withs(frame.file, frame.line, frame.function):
            if not _AUTOCAST_CALL.search(text) or _AUTOCAST_OFF.search(text):
                continue
            dtype = _AUTOCAST_DTYPE.search(text)
            value = {"half": "float16"}.get(dtype.group(1), dtype.group(1)) if dtype else "on"
            return Mark(value, "source", f"`with …autocast(…)` at {short_path(frame.file)}:{line} around "
                                         f"{describe(frame)}")
    return None


def _grad_scaler(python: tuple[StackFrame, ...]) -> Mark | None:
    scaler = [f for f in python if _in(f, _SCALER_FILES)]
    if not scaler:
        return None
    enabled = next((f for f in scaler if _base(f.function) in _SCALER_ENABLED_ONLY), None)
    if enabled is not None:
        return Mark("enabled", "stacks", f"{describe(enabled)} (runs only when the scaler is enabled)")
    step = next((f for f in scaler if frame_matches(f, "GradScaler.step")), None)
    if step is not None:
        text = source_lines.line_in(step.file, step.line, step.function)
        above = source_lines.previous_code_line(step.file, step.line)
        # GradScaler.step calls the optimizer right under `if not self._enabled:` when disabled; every other call
        # of it (through _maybe_opt_step, or straight for a fused optimizer that unscales itself) comes after.
        if text is not None and "optimizer.step(" in text:
            if above == "if not self._enabled:":
                return Mark("disabled", "source", f"{describe(step)} passes straight to the optimizer "
                                                  "(`if not self._enabled:`)")
            return Mark("enabled", "source", f"{describe(step)} steps the optimizer past the scaler's "
                                             "`if not self._enabled:` return")
    return Mark("seen", "stacks", describe(scaler[0]))


def _checkpointing(python: tuple[StackFrame, ...]) -> tuple[Mark | None, bool]:
    frames = [f for f in python if _in(f, _CHECKPOINT_FILES)]
    if not frames:
        return None, False
    return Mark("on", "stacks", describe(frames[-1])), any(_RECOMPUTE.search(f.function) for f in frames)


def _optimizer(python: tuple[StackFrame, ...]) -> Mark | None:
    for frame in python:
        match = _TORCH_OPTIMIZER.match(_base(frame.function))
        if match and "torch/optim/" in frame.file:
            return Mark(_OPTIMIZER_KINDS[match.group(1)], "stacks", describe(frame))
        if _in(frame, _FUSED_OPTIMIZER_FILES):
            return Mark("fused", "stacks", describe(frame))
    return None


def _host_sync(frames: Sequence[StackFrame], python: tuple[StackFrame, ...]) -> Mark | None:
    for frame in frames:
        if frame.native:
            for value, name in _SYNC_NATIVE:
                if name in frame.function:
                    return Mark(value, "stacks", f"native frame {frame.function}")
    for frame in python:
        if frame.file.endswith(_TENSOR_STR):
            return Mark("print", "stacks", f"{describe(frame)} (a tensor formatted for printing)")
        for value, function, suffix in _SYNC_FRAMES:
            if frame_matches(frame, function, suffix):
                return Mark(value, "stacks", describe(frame))
    innermost = python[0] if python else None
    if innermost is None or is_library(innermost):
        return None
    text = source_lines.line_in(innermost.file, innermost.line, innermost.function)
    for value, pattern in _SYNC_CALLS if text is not None else ():
        if pattern.search(text or ""):
            return Mark(value, "source", f"{describe(innermost)} calls {SYNC_WORDS[value]}")
    return None


# How each host synchronisation is written in the job's code (said in the step facts and the levers).
SYNC_WORDS = {"item": ".item()", "cpu": ".cpu()", "tolist": ".tolist()", "numpy": ".numpy()",
              "synchronize": "torch.cuda.synchronize()", "print": "print(tensor)"}


def _copies(python: tuple[StackFrame, ...]) -> tuple[Mark | None, Mark | None]:
    """(pin_memory, non_blocking) as the stack shows them."""
    pin = next((f for f in python if f.file.endswith(_PIN_MEMORY_FILE)), None)
    pinned = Mark("on", "stacks", describe(pin)) if pin is not None else None
    innermost = python[0] if python else None
    if innermost is None or is_library(innermost):
        return pinned, None
    text = source_lines.line_in(innermost.file, innermost.line, innermost.function) or ""
    if pinned is None and _PIN_CALL.search(text):
        pinned = Mark("on", "source", f"{describe(innermost)} calls .pin_memory()")
    quick = Mark("on", "source", f"{describe(innermost)} copies with non_blocking=True") \
        if _NON_BLOCKING.search(text) else None
    return pinned, quick


def _unread(python: tuple[StackFrame, ...]) -> str | None:
    """The user's file at the innermost frame where it cannot be read here."""
    user = next((f for f in python if not is_library(f)), None)
    if user is None or user is not python[0] or source_lines.readable(user.file):
        return None
    return user.file


def stack_marks(frames: tuple[StackFrame, ...]) -> StackMarks:
    """What the stack `frames` (innermost first) shows of the step's make-up."""
    python = _python(frames)
    compiled = _compiled(frames)
    checkpointing, recomputing = _checkpointing(python)
    pin_memory, non_blocking = _copies(python)
    return StackMarks(
        compiled=compiled,
        eager_module=_eager_module(python) if compiled is None else None,
        generated_files=tuple(dict.fromkeys(f.file for f in python if is_generated_code(f))),
        attention=_attention(python),
        autocast=_autocast(frames, python),
        grad_scaler=_grad_scaler(python),
        checkpointing=checkpointing,
        recomputing=recomputing,
        optimizer=_optimizer(python),
        host_sync=_host_sync(frames, python),
        pin_memory=pin_memory,
        non_blocking=non_blocking,
        unread_file=_unread(python),
    )


_CACHE_SIZE = 1024
_marks_cache: LruCache[tuple[StackFrame, ...], StackMarks] = LruCache(_CACHE_SIZE)


def stack_marks_cached(frames: tuple[StackFrame, ...]) -> StackMarks:
    """stack_marks, memoised by stack."""
    return _marks_cache.get_or_build(frames, lambda: stack_marks(frames))
