"""The reference training step behind ``gputop probe``: what this GPU does on a known workload.

A model of the asked shape trains for a few steps on one synthetic batch that already sits on the
device: forward, backward, gradient clipping, AdamW (fused on CUDA). Nothing is read from disk, so the
step time is the compute the model costs here; a training job that takes much longer per iteration on
the same shape loses the difference elsewhere (input pipeline, host, collectives).

The model is the only per-family part: ``MODEL_BUILDERS`` maps a family (probes/models/) to its torch
module: nanoGPT's GPT in probes/reference/gpt_probe_model.py (our own implementation, same module names and
initialisation), the Llama-shaped decoder in probes/reference/llama_probe_model.py, and the mixture of experts
built on it in probes/reference/moe_probe_model.py (its experts in a plain loop). Every family in probes/models
has a builder (tests/unit/test_llama_probe.py checks).

``layers`` (``--layers N``) builds and times N of the shape's L layers and scales the result to L: the
forward and backward by FLOP per token (the family's own count, so the embedding and lm_head are counted
once), the optimizer by parameters. The result says that it was scaled and from how many layers.

Timing: the first step (torch.compile, cuBLAS autotuning, allocator growth) and the other warm-up steps
are excluded and reported separately; the timed steps are measured with CUDA events on a GPU and
``time.perf_counter`` on the CPU, and the median is reported. One step is one micro-batch forward and
backward plus one optimizer step; with ``grad_accum`` the optimizer iteration is *predicted* as
grad_accum × (forward + backward) + optimizer, which is what nanoGPT's loop does.

torch is imported inside functions only: gputop's monitor must work without it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from probes.models import ModelShape, family_of
from probes.models.llama import LlamaShape
from probes.models.moe import MoeShape
from probes.models.peaks import peak_flops, user_peak
from probes.reference.gpt_probe_model import gpt_class
from probes.reference.like_settings import LikeJob
from probes.reference.llama_probe_model import llama_class
from probes.reference.moe_probe_model import moe_class
from probes.reference.probe_load import LOAD_WINDOW_S, LoadWatch, ProbeLoad

PROBE_SCHEMA = "gputop.probe/1"
DTYPE_CHOICES = ("auto", "bf16", "fp16", "fp32")
TORCH_MISSING = "the probe needs torch: pip install 'gputop[probe]'"
BYTES_PER_TRAINED_PARAM = 16  # fp32 weight and gradient, AdamW's two moments


class ProbeInputError(ValueError):
    """A configuration this machine cannot run (no CUDA, a dtype the device lacks, a bad shape)."""


class ProbeOutOfMemory(RuntimeError):
    """The configuration does not fit; carries the largest batch size that did."""

    def __init__(self, message: str, batch_size: int, largest_fitting_batch: int):
        super().__init__(message)
        self.batch_size = batch_size
        self.largest_fitting_batch = largest_fitting_batch


@dataclass(frozen=True)
class ProbeConfig:
    shape: ModelShape  # a shape of a family in MODEL_BUILDERS
    model: str = "custom"  # preset name, for output
    batch_size: int = 12
    grad_accum: int = 1
    dtype: str = "auto"  # one of DTYPE_CHOICES
    compile: bool = False
    steps: int = 10  # timed steps
    warmup: int = 3  # untimed steps before them; the first one includes compilation
    device: str = "auto"  # auto, cpu, cuda, cuda:N
    peak_tflops: float | None = None  # overrides the table
    learning_rate: float = 6e-4
    seed: int = 1337
    layers: int | None = None  # build and time this many of the shape's layers, then scale to all of them

    def problem(self) -> str | None:
        shape_problem = self.shape.problem()
        if shape_problem:
            return shape_problem
        builder_problem = _builder(self.shape).problem(self.shape)
        if builder_problem:
            return builder_problem
        layers = total_layers(self.shape)
        if self.layers is not None and not 1 <= self.layers <= layers:
            return f"--layers must be between 1 and the model's {layers} layers (got {self.layers})"
        if self.dtype not in DTYPE_CHOICES:
            return f"--dtype must be one of {', '.join(DTYPE_CHOICES)} (got {self.dtype!r})"
        for name, minimum in (("batch_size", 1), ("grad_accum", 1), ("steps", 1), ("warmup", 1)):
            if getattr(self, name) < minimum:
                return f"--{name.replace('_', '-')} must be at least {minimum} (got {getattr(self, name)})"
        if self.peak_tflops is not None and self.peak_tflops <= 0:
            return f"--peak-tflops must be positive (got {self.peak_tflops})"
        return None

    @property
    def built_shape(self) -> ModelShape:
        """The shape the probe builds: ``layers`` of the shape's layers when given, else all of them."""
        if self.layers is None:
            return self.shape
        return dataclasses.replace(self.shape, **{_builder(self.shape).layers_field: self.layers})


@dataclass(frozen=True)
class ProbeResult:
    model: str
    shape: ModelShape  # the whole model's shape (a family's dataclass), also when fewer layers were built
    device: str  # "cuda:0", "cpu"
    device_name: str  # the GPU's name as CUDA reports it, or the CPU model
    torch_version: str
    dtype: str  # bf16, fp16 or fp32: what the matmuls ran in
    tf32: bool  # fp32 matmuls allowed to use TF32 tensor cores
    compiled: bool
    fused_adamw: bool
    params: int  # the whole model's, without position embeddings, as in the FLOP formula
    params_with_position_embeddings: int
    flops_per_token: int
    flops_formula: str
    batch_size: int
    grad_accum: int
    tokens_per_step: int  # batch_size × block_size
    tokens_per_iter: int  # × grad_accum
    warmup_steps: int
    timed_steps: int
    timing: str  # "CUDA events" or "time.perf_counter"
    first_step_seconds: float  # wall time, includes compilation and autotuning
    compile_seconds: float | None  # first step minus a timed step, when compiling
    step_seconds: float  # median forward + backward + optimizer, one micro-batch
    step_seconds_min: float
    step_seconds_max: float
    fwd_bwd_seconds: float  # median
    optimizer_seconds: float  # median, clipping and zero_grad included
    iter_seconds: float  # the step's median with grad_accum 1; else predicted: grad_accum × fwd_bwd + optimizer
    tokens_per_s: float
    achieved_flops_per_s: float
    peak_dtype: str  # the column of the peak table used: bf16, fp16, tf32 or fp32
    peak_flops_per_s: float | None
    peak_source: str  # where the peak comes from, or why there is none
    mfu: float | None  # fraction of peak
    peak_memory_bytes: int | None  # CUDA max_memory_allocated; None on the CPU
    losses: tuple[float, ...]  # every step's loss, warm-up included
    schema: str = PROBE_SCHEMA
    # The other load before, during and after the timed steps (probes/reference/probe_load.py); its `clean` False
    # says the figure is not this machine's quiet baseline. None in results written before it was measured.
    other_load: ProbeLoad | None = None
    family: str = "gpt2"  # probes/models' family name (results written before there were others are GPT)
    scaled_from_layers: int | None = None  # layers built and timed when the times are scaled to the shape's
    scaling: str | None = None  # how they were scaled, in words
    # `gputop probe --like PID`: the job whose settings these are, each with where it came from (like_settings.py)
    like: LikeJob | None = None


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _rotary_problem(shape: LlamaShape | MoeShape) -> str | None:
    # Rotary positions rotate pairs of a head's channels.
    return None if shape.head_dim % 2 == 0 else f"head_dim must be even for rotary positions (got {shape.head_dim})"


@dataclass(frozen=True)
class ModelBuilder:
    """How the probe builds one family's model: all that differs between families."""

    module_class: Callable[[], type]  # the nn.Module class taking the shape; built on first use (torch)
    layers_field: str  # the shape's field that counts its layers, replaced for --layers
    problem: Callable[[Any], str | None] = lambda shape: None  # what the module cannot build, beyond shape.problem()


MODEL_BUILDERS: dict[str, ModelBuilder] = {  # one per family of probes.models.FAMILIES
    "gpt2": ModelBuilder(gpt_class, "n_layer"),
    "llama": ModelBuilder(llama_class, "num_layers", _rotary_problem),
    "moe": ModelBuilder(moe_class, "num_layers", _rotary_problem),
}


# Steps a batch size must survive to count as fitting (see _search_largest_batch).
FIT_CHECK_STEPS = 2


def largest_fitting_batch(fits: Callable[[int], bool], failed_batch: int) -> int:
    """Largest batch in [1, failed_batch) for which fits() is True (binary search; memory is monotone
    in batch size); 0 when even 1 does not fit."""
    lo, hi = 0, failed_batch  # invariant: lo fits (0 trivially), hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _builder(shape: ModelShape) -> ModelBuilder:
    return MODEL_BUILDERS[family_of(shape).name]


def total_layers(shape: ModelShape) -> int:
    """The shape's number of layers, whatever its family calls the field."""
    return getattr(shape, _builder(shape).layers_field)


# --- device, dtype and peak ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    device: str
    device_type: str
    device_name: str
    dtype: str
    tf32: bool
    peak_dtype: str
    capability: tuple[int, int] | None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return "CPU: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU: " + (platform.processor() or platform.machine() or "unknown")


def _host_memory_available() -> int | None:
    """MemAvailable from /proc/meminfo in bytes; None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _host_memory_problem(config: ProbeConfig) -> str | None:
    """Why the model cannot train in this host's memory, with the --layers that would; None if it may.

    Checked before building on the CPU: there the kernel's OOM killer ends the process instead of
    raising the error the GPU path turns into its largest-batch search. Of the activations only the
    logits and their gradient are counted (fp32, batch × block × vocab each): a lower bound.
    """
    available = _host_memory_available()
    if available is None:
        return None
    family = family_of(config.shape)
    logits = 2 * 4 * config.batch_size * config.shape.block_size * config.shape.vocab_size

    def needed(shape: ModelShape) -> int:
        return family.params(shape) * BYTES_PER_TRAINED_PARAM + logits

    if needed(config.built_shape) <= available:
        return None
    fitting = [layers for layers in range(1, total_layers(config.shape) + 1)
               if needed(dataclasses.replace(config, layers=layers).built_shape) <= available]
    hint = f": try --layers {fitting[-1]}" if fitting else ": not even one layer fits; lower --batch-size"
    return (f"{config.model} at batch {config.batch_size} × block {config.shape.block_size} needs at least "
            f"{needed(config.built_shape) / 2**30:.1f} GiB (fp32 weights, gradients, AdamW state and logits); "
            f"this machine has {available / 2**30:.1f} GiB available{hint}")


def _plan(config: ProbeConfig, torch) -> _Plan:
    requested = config.device.strip().lower()
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cpu":
        if config.dtype == "fp16":
            raise ProbeInputError("--dtype fp16 needs a CUDA GPU; use bf16 or fp32 on the CPU")
        dtype = "fp32" if config.dtype == "auto" else config.dtype
        return _Plan("cpu", "cpu", _cpu_name(), dtype, False, dtype, None)
    if not requested.startswith("cuda"):
        raise ProbeInputError(f"--device must be auto, cpu, cuda or cuda:N (got {config.device!r})")
    if not torch.cuda.is_available():
        raise ProbeInputError("--device cuda asked for, but torch sees no CUDA GPU "
                              f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})")
    index_text = requested.partition(":")[2] or "0"
    if not index_text.isdigit() or int(index_text) >= torch.cuda.device_count():
        raise ProbeInputError(f"no GPU {config.device!r}: torch sees {torch.cuda.device_count()}")
    index = int(index_text)
    capability = torch.cuda.get_device_capability(index)
    has_bf16 = capability[0] >= 8  # Ampere and later; older GPUs only emulate it
    dtype = config.dtype
    if dtype == "auto":
        dtype = "bf16" if has_bf16 else "fp16"
    if dtype == "bf16" and not has_bf16:
        raise ProbeInputError(f"--dtype bf16 needs compute capability 8.0 or later (this GPU is "
                              f"{capability[0]}.{capability[1]}); use --dtype fp16")
    tf32 = capability[0] >= 8
    peak_dtype = "tf32" if dtype == "fp32" and tf32 else dtype
    return _Plan(f"cuda:{index}", "cuda", torch.cuda.get_device_name(index), dtype, tf32, peak_dtype,
                 capability)


def _peak(config: ProbeConfig, plan: _Plan) -> tuple[float | None, str]:
    if config.peak_tflops is not None:
        return user_peak(config.peak_tflops, plan.peak_dtype).flops_per_s, "--peak-tflops"
    if plan.device_type == "cpu":
        return None, "no CPU peak is known; pass --peak-tflops for an MFU"
    peak = peak_flops(plan.device_name, plan.peak_dtype)
    if peak is None:
        return None, (f"{plan.device_name} has no {plan.peak_dtype} entry in gputop's peak table; "
                      "pass --peak-tflops")
    return peak.flops_per_s, peak.source


def _is_oom(exc: BaseException, torch) -> bool:
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return "out of memory" in text or "can't allocate memory" in text


# --- the step --------------------------------------------------------------------------------------


class _Trainer:
    """A model, its optimizer and one synthetic batch on the device; step() is one training step."""

    def __init__(self, config: ProbeConfig, plan: _Plan, batch_size: int, compile_model: bool, torch):
        self.torch = torch
        self.plan = plan
        torch.manual_seed(config.seed)
        shape = config.built_shape
        with torch.device(plan.device):  # initialise on the device: no host copy of a 1.5B model
            self.model = _builder(shape).module_class()(shape)
        self.params = self.model.num_params()
        self.params_with_position_embeddings = self.model.num_params(non_embedding=False)
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.model.parameters() if p.dim() < 2]
        self.fused = plan.device_type == "cuda"
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
            lr=config.learning_rate, betas=(0.9, 0.95), **({"fused": True} if self.fused else {}),
        )
        self.scaler = torch.amp.GradScaler(plan.device_type, enabled=plan.dtype == "fp16")
        self.forward = torch.compile(self.model) if compile_model else self.model
        autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(plan.dtype)
        self.autocast = (
            functools.partial(torch.autocast, device_type=plan.device_type, dtype=autocast_dtype)
            if autocast_dtype is not None else contextlib.nullcontext
        )
        generator = torch.Generator(device="cpu").manual_seed(config.seed)
        # One fixed batch: the probe measures compute, and a model that sees the same batch again
        # learns it, so the loss falls and shows the step really trains.
        tokens = torch.randint(config.shape.vocab_size, (batch_size, config.shape.block_size + 1),
                               generator=generator)
        self.inputs = tokens[:, :-1].contiguous().to(plan.device)
        self.targets = tokens[:, 1:].contiguous().to(plan.device)

    def step(self, marks: Callable[[int], None] | None = None):
        """One forward/backward and optimizer step; marks(0|1|2) at start, after backward, at end."""
        torch = self.torch
        if marks:
            marks(0)
        with self.autocast():
            _, loss = self.forward(self.inputs, self.targets)
        self.scaler.scale(loss).backward()
        if marks:
            marks(1)
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if marks:
            marks(2)
        return loss.detach()

    def synchronize(self) -> None:
        if self.plan.device_type == "cuda":
            self.torch.cuda.synchronize(self.plan.device)


class _CudaTimer:
    def __init__(self, torch, steps: int):
        self.events = [[torch.cuda.Event(enable_timing=True) for _ in range(3)] for _ in range(steps)]
        self.current = 0

    def marks(self, which: int) -> None:
        self.events[self.current][which].record()
        if which == 2:
            self.current += 1

    def durations(self) -> list[tuple[float, float]]:
        """(fwd+bwd, optimizer) seconds per step; call after synchronising."""
        return [(e[0].elapsed_time(e[1]) / 1000.0, e[1].elapsed_time(e[2]) / 1000.0) for e in self.events]


class _WallTimer:
    def __init__(self, steps: int):
        self.times = [[0.0, 0.0, 0.0] for _ in range(steps)]
        self.current = 0

    def marks(self, which: int) -> None:
        self.times[self.current][which] = time.perf_counter()
        if which == 2:
            self.current += 1

    def durations(self) -> list[tuple[float, float]]:
        return [(t[1] - t[0], t[2] - t[1]) for t in self.times]


def _measure(config: ProbeConfig, plan: _Plan, say: Callable[[str], None], torch,
             watch: LoadWatch | None = None) -> ProbeResult:
    if plan.device_type == "cuda":
        torch.cuda.reset_peak_memory_stats(plan.device)
    built = config.built_shape
    part = "" if config.layers is None else f"{config.layers} of {total_layers(config.shape)} layers of "
    say(f"building {part}{config.model} ({config.shape.describe()}) on {plan.device}")
    trainer = _Trainer(config, plan, config.batch_size, config.compile, torch)
    losses = []

    say("warm-up step 1" + (" (includes torch.compile)" if config.compile else ""))
    start = time.perf_counter()
    losses.append(trainer.step())
    trainer.synchronize()
    first_step = time.perf_counter() - start
    for _ in range(config.warmup - 1):
        losses.append(trainer.step())
    trainer.synchronize()

    say(f"timing {config.steps} steps")
    timer = _CudaTimer(torch, config.steps) if plan.device_type == "cuda" else _WallTimer(config.steps)
    if watch is not None:
        watch.start_timing()
    for _ in range(config.steps):
        losses.append(trainer.step(timer.marks))
    trainer.synchronize()
    if watch is not None:
        watch.stop_timing()

    family = family_of(config.shape)
    # Scale factors are exactly 1 when every layer was built.
    fwd_bwd_scale = family.flops_per_token(config.shape) / family.flops_per_token(built)
    optimizer_scale = family.params(config.shape) / family.params(built)
    durations = [(fwd_bwd * fwd_bwd_scale, opt * optimizer_scale) for fwd_bwd, opt in timer.durations()]
    steps = [fwd_bwd + opt for fwd_bwd, opt in durations]
    step = statistics.median(steps)
    fwd_bwd = statistics.median(d[0] for d in durations)
    optimizer = statistics.median(d[1] for d in durations)
    # One micro-batch an iteration: the iteration is the step, timed whole. Summed, the parts' medians are not the
    # whole's median (0.667 s beside a 0.679 s step on one run); with accumulation the iteration is predicted from
    # them, as the live pace predicts a job's (baseline.reference_iteration).
    iteration = step if config.grad_accum == 1 else config.grad_accum * fwd_bwd + optimizer
    tokens_per_step = config.batch_size * config.shape.block_size
    tokens_per_iter = tokens_per_step * config.grad_accum
    per_token = family.flops_per_token(config.shape)
    achieved = per_token * tokens_per_iter / iteration
    peak, peak_source = _peak(config, plan)
    params, params_with_position_embeddings = trainer.params, trainer.params_with_position_embeddings
    scaling = None
    if config.layers is not None:
        params = family.params(config.shape)
        params_with_position_embeddings = params + trainer.params_with_position_embeddings - trainer.params
        layers = total_layers(config.shape)
        scaling = (f"built and timed {config.layers} of {layers} layers, scaled to {layers}: "
                   f"forward+backward × {fwd_bwd_scale:.4g} (FLOP per token; embedding and lm_head once), "
                   f"optimizer × {optimizer_scale:.4g} (parameters)")
    return ProbeResult(
        model=config.model,
        shape=config.shape,
        device=plan.device,
        device_name=plan.device_name,
        torch_version=torch.__version__,
        dtype=plan.dtype,
        tf32=plan.tf32,
        compiled=config.compile,
        fused_adamw=trainer.fused,
        params=params,
        params_with_position_embeddings=params_with_position_embeddings,
        flops_per_token=per_token,
        flops_formula=family.formula_with_values(config.shape),
        batch_size=config.batch_size,
        grad_accum=config.grad_accum,
        tokens_per_step=tokens_per_step,
        tokens_per_iter=tokens_per_iter,
        warmup_steps=config.warmup,
        timed_steps=config.steps,
        timing="CUDA events" if plan.device_type == "cuda" else "time.perf_counter",
        first_step_seconds=first_step,
        compile_seconds=max(first_step - step, 0.0) if config.compile else None,
        step_seconds=step,
        step_seconds_min=min(steps),
        step_seconds_max=max(steps),
        fwd_bwd_seconds=fwd_bwd,
        optimizer_seconds=optimizer,
        iter_seconds=iteration,
        tokens_per_s=tokens_per_iter / iteration,
        achieved_flops_per_s=achieved,
        peak_dtype=plan.peak_dtype,
        peak_flops_per_s=peak,
        peak_source=peak_source,
        mfu=achieved / peak if peak else None,
        peak_memory_bytes=torch.cuda.max_memory_allocated(plan.device) if plan.device_type == "cuda" else None,
        losses=tuple(float(loss) for loss in losses),
        family=family.name,
        scaled_from_layers=config.layers,
        scaling=scaling,
    )


def _search_largest_batch(config: ProbeConfig, plan: _Plan, torch) -> int:
    """Largest batch below the one that failed for which one step fits (without torch.compile)."""

    def release() -> None:
        if config.compile:
            torch._dynamo.reset()  # compiled graphs keep the failed model's tensors alive
        gc.collect()
        if plan.device_type == "cuda":
            torch.cuda.empty_cache()

    def one_step(batch_size: int) -> None:
        trainer = _Trainer(config, plan, batch_size, False, torch)
        # Two steps, not one: AdamW allocates its two moments at the end of the first step, so only the
        # second step's forward and backward hold activations, gradients and optimizer state at once. A
        # one-step check passed llama-3-8b (2 layers, block 8192) at batch 4 on an H100, and the probe then
        # ran out of memory at batch 4.
        for _ in range(FIT_CHECK_STEPS):
            trainer.step()
        trainer.synchronize()

    def fits(batch_size: int) -> bool:
        try:
            one_step(batch_size)
        except Exception as exc:
            if not _is_oom(exc, torch):
                raise
            ok = False
        else:
            ok = True
        release()  # after the except block: the failed step's frames are gone, so its tensors are too
        return ok

    release()
    return largest_fitting_batch(fits, config.batch_size)


def _oom_message(config: ProbeConfig, plan: _Plan, largest: int, torch) -> str:
    where = plan.device_name
    if plan.device_type == "cuda":
        total = torch.cuda.get_device_properties(plan.device).total_memory
        where = f"{plan.device_name} ({total / 2**30:.1f} GiB)"
    tried = f"{config.model} at batch {config.batch_size} × block {config.shape.block_size}"
    if largest == 0:
        params = family_of(config.shape).params(config.built_shape)
        return (f"out of memory: {tried} does not fit on {where}, not even at batch 1; weights, gradients "
                f"and AdamW state alone take about {params * BYTES_PER_TRAINED_PARAM / 2**30:.1f} GiB in fp32")
    accum = config.grad_accum * config.batch_size / largest
    keep = f" --grad-accum {accum:g}" if accum == int(accum) else ""
    return (f"out of memory: {tried} does not fit on {where}; the largest batch that fit is {largest} "
            f"(found without torch.compile): try --batch-size {largest}{keep}")


def _device_uuid(plan: _Plan, torch) -> str | None:
    """The probe's GPU's UUID as torch knows it (matched against NVML's), or None."""
    try:
        return str(torch.cuda.get_device_properties(plan.device).uuid)
    except Exception:  # an older torch without .uuid: every GPU's other processes count
        return None


def run_probe(config: ProbeConfig, say: Callable[[str], None] | None = None,
              measure_load: bool = True) -> ProbeResult:
    """Train the reference model for config.warmup + config.steps steps and report what it achieved, with the
    machine's other load around the timed steps (`measure_load`: LOAD_WINDOW_S before and after).

    Raises ProbeInputError for a configuration this machine cannot run, ProbeOutOfMemory (with the
    largest batch that fit) when it does not fit, and ImportError when torch is missing.
    """
    problem = config.problem()
    if problem:
        raise ProbeInputError(problem)
    import torch

    say = say or (lambda _message: None)
    plan = _plan(config, torch)
    if plan.device_type == "cpu":
        memory_problem = _host_memory_problem(config)
        if memory_problem:
            raise ProbeInputError(memory_problem)
    if plan.device_type == "cuda":
        torch.cuda.set_device(plan.device)  # CUDA events record on the current device's stream
        torch.set_float32_matmul_precision("high" if plan.tf32 else "highest")
    watch = LoadWatch(gpu=plan.device_type == "cuda") if measure_load else None
    if watch is not None:  # once the configuration is known to run, before the model is built: the machine as it is
        if plan.device_type == "cuda":
            watch.gpu_uuid = _device_uuid(plan, torch)
        say(f"reading the machine's other load for {LOAD_WINDOW_S:g} s (before and after timing)")
        watch.before()
    try:
        result = _measure(config, plan, say, torch, watch)
    except Exception as exc:
        if not _is_oom(exc, torch):
            raise
    else:
        if watch is None:
            return result
        watch.after()
        load = watch.result()
        if not load.clean and load.note is not None:  # a load that is not clean always says why
            say(load.note)
        return dataclasses.replace(result, other_load=load)
    # Outside the except block, so the failed step's tensors (held by the traceback) can be freed.
    say(f"out of memory at batch {config.batch_size}; searching for the largest batch that fits")
    largest = _search_largest_batch(config, plan, torch)
    raise ProbeOutOfMemory(_oom_message(config, plan, largest, torch), config.batch_size, largest)


