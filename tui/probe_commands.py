"""The ``gputop probe`` and ``gputop mfu`` subcommands: argument parsing, checks and printed reports.

``register(subparsers)`` adds both; each sets ``func(args) -> exit code``. Bad input is one line on
stderr and exit status 2. torch is imported only when ``probe`` runs (gputop's monitor works without
it) and Textual not at all.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from probes.gpt_probe import (
    DTYPE_CHOICES,
    TORCH_MISSING,
    ProbeConfig,
    ProbeInputError,
    ProbeOutOfMemory,
    run_probe,
    torch_available,
)
from probes.models import PRESETS
from probes.models.gpt2 import (
    NANOGPT_PROMISED_FLOPS,
    GptShape,
    count_params,
    explain_nanogpt_mfu,
    formula_with_values,
)
from probes.models.mfu import estimate_mfu
from probes.models.peaks import DTYPES, lookup_gpu, peak_flops, user_peak
from probes.nvml import gpu_names
from tui.argtypes import positive_float as _positive_float
from tui.argtypes import positive_int as _positive_int
from tui.exitcodes import EXIT_OK, EXIT_USAGE

MFU_SCHEMA = "gputop.mfu/1"
MODEL_CHOICES = (*PRESETS, "custom")
DEFAULT_BATCH_SIZE = 12  # nanoGPT's train_gpt2 config
DEFAULT_BATCH_SIZE_BY_MODEL = {"tiny": 8}
CUSTOM_DEFAULTS = {"block_size": 1024, "vocab_size": 50304}


def _fail(message: str) -> int:
    print(f"gputop: {message}", file=sys.stderr)
    return EXIT_USAGE


def _add_model_arguments(parser: argparse.ArgumentParser, default_model: str | None) -> None:
    parser.add_argument("--model", choices=MODEL_CHOICES, default=default_model,
                        help="nanoGPT configuration (vocab 50304, block 1024, no bias), or custom"
                             + (f" (default {default_model})" if default_model else ""))
    shape = parser.add_argument_group("model shape (custom, or overriding a preset)")
    shape.add_argument("--n-layer", type=_positive_int, metavar="L")
    shape.add_argument("--n-head", type=_positive_int, metavar="H")
    shape.add_argument("--n-embd", type=_positive_int, metavar="C")
    shape.add_argument("--block-size", type=_positive_int, metavar="T")
    shape.add_argument("--vocab-size", type=_positive_int, metavar="V")
    shape.add_argument("--bias", action="store_true", help="biases in Linear and LayerNorm (GPT-2 checkpoints)")


def _shape(args: argparse.Namespace) -> tuple[GptShape | None, str | None]:
    """The model shape the arguments ask for, or the one-line reason they do not make one."""
    overrides = {name: getattr(args, name) for name in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")
                 if getattr(args, name) is not None}
    if args.model is None:
        return None, "--model is required (a preset, or custom with --n-layer --n-head --n-embd)"
    if args.model == "custom":
        missing = [f"--{name.replace('_', '-')}" for name in ("n_layer", "n_head", "n_embd")
                   if name not in overrides]
        if missing:
            return None, f"--model custom needs {', '.join(missing)}"
        shape = GptShape(**{**CUSTOM_DEFAULTS, **overrides})
    else:
        shape = dataclasses.replace(PRESETS[args.model], **overrides)
    if args.bias:
        shape = dataclasses.replace(shape, bias=True)
    problem = shape.problem()
    return (None, problem) if problem else (shape, None)


def register(subparsers) -> None:
    """Add the ``probe`` and ``mfu`` subcommands to an argparse subparsers object."""
    probe = subparsers.add_parser(
        "probe", help="time a reference GPT training step on this GPU (needs torch)",
        description="Train a nanoGPT-architecture GPT for a few steps on synthetic tokens and report step "
                    "time, tokens/s, achieved TFLOP/s and MFU. Compare with your job's own iteration time: "
                    "the same shape taking much longer there is time lost outside the model.",
    )
    _add_model_arguments(probe, default_model="gpt2")
    probe.add_argument("--batch-size", type=_positive_int, metavar="B",
                       help=f"sequences per micro-step (default {DEFAULT_BATCH_SIZE}; tiny: 8)")
    probe.add_argument("--grad-accum", type=_positive_int, default=1, metavar="N",
                       help="micro-steps per optimizer iteration, for the predicted iteration time")
    probe.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto",
                       help="auto: bf16 on GPUs that have it, else fp16; fp32 on the CPU")
    probe.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False,
                       help="torch.compile the model (its time is reported separately)")
    probe.add_argument("--steps", type=_positive_int, default=10, help="timed steps (default 10)")
    probe.add_argument("--warmup", type=_positive_int, default=3, help="untimed steps first (default 3)")
    probe.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    probe.add_argument("--peak-tflops", type=_positive_float, metavar="TF",
                       help="the GPU's dense peak for this dtype, when gputop's table lacks it")
    probe.add_argument("--json", action="store_true", help="print one JSON document")
    probe.set_defaults(func=run_probe_command)

    mfu = subparsers.add_parser(
        "mfu", help="achieved TFLOP/s and MFU of a GPT run from its iteration time",
        description="nanoGPT's FLOP count (6·N + 12·L·H·Q·T per token) over the iteration time, against "
                    "the GPU's dense peak. --nanogpt-mfu explains the mfu nanoGPT printed.",
    )
    _add_model_arguments(mfu, default_model=None)
    mfu.add_argument("--tokens-per-iter", type=_positive_int, metavar="N",
                     help="tokens per optimizer iteration (default: batch × block × grad-accum)")
    mfu.add_argument("--batch-size", type=_positive_int, metavar="B")
    mfu.add_argument("--grad-accum", type=_positive_int, default=1, metavar="N")
    mfu.add_argument("--iter-time", type=_positive_float, required=True, metavar="S",
                     help="seconds per optimizer iteration")
    mfu.add_argument("--gpu", metavar="NAME", help='the GPU\'s name as nvidia-smi shows it, e.g. "NVIDIA H200" '
                                                   "(default: this machine's, found through NVML)")
    mfu.add_argument("--peak-tflops", type=_positive_float, metavar="TF", help="dense peak, overriding the table")
    mfu.add_argument("--dtype", choices=DTYPES, default="bf16", help="which peak to use (default bf16)")
    mfu.add_argument("--nanogpt-mfu", type=float, metavar="PCT", help="the mfu nanoGPT printed, e.g. 164")
    mfu.add_argument("--json", action="store_true", help="print one JSON document")
    mfu.set_defaults(func=run_mfu_command)


# --- gputop probe ------------------------------------------------------------------------------------


def run_probe_command(args: argparse.Namespace) -> int:
    shape, problem = _shape(args)
    if problem:
        return _fail(problem)
    if not torch_available():
        return _fail(TORCH_MISSING)
    config = ProbeConfig(
        shape=shape,
        model=args.model,
        batch_size=args.batch_size or DEFAULT_BATCH_SIZE_BY_MODEL.get(args.model, DEFAULT_BATCH_SIZE),
        grad_accum=args.grad_accum,
        dtype=args.dtype,
        compile=args.compile,
        steps=args.steps,
        warmup=args.warmup,
        device=args.device,
        peak_tflops=args.peak_tflops,
    )
    try:
        result = run_probe(config, say=lambda message: print(f"gputop probe: {message}", file=sys.stderr))
    except (ProbeInputError, ProbeOutOfMemory) as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(dataclasses.asdict(result), indent=2))
    else:
        print("\n".join(format_probe_report(result)))
    return EXIT_OK


def _scientific(value: float) -> str:
    """1.027e10 rather than Python's 1.027e+10."""
    mantissa, _, exponent = f"{value:.4g}".partition("e")
    return f"{mantissa}e{int(exponent)}" if exponent else mantissa


def _gib(size: int) -> str:
    return f"{size / 2**30:.2f} GiB"


def format_probe_report(result) -> list[str]:
    """The probe's result as aligned lines for a terminal."""
    settings = [f"{result.dtype} {'autocast' if result.dtype != 'fp32' else 'matmuls'}"]
    if result.tf32:
        settings.append("TF32 on")
    settings += ["AdamW fused" if result.fused_adamw else "AdamW", "SDPA causal attention",
                 f"torch.compile {'on' if result.compiled else 'off'}"]
    warmup = (f"{result.warmup_steps} step{'s' if result.warmup_steps > 1 else ''}, "
              f"the first {result.first_step_seconds:.2f} s")
    if result.compile_seconds is not None:
        warmup += f" (torch.compile and autotuning ≈ {result.compile_seconds:.1f} s)"
    iteration = f"{result.iter_seconds:.3f} s"
    if result.grad_accum > 1:
        iteration += (f" predicted ({result.grad_accum} × {result.fwd_bwd_seconds:.4f} s forward+backward"
                      f" + {result.optimizer_seconds:.4f} s optimizer)")
    peak = (f"{result.peak_flops_per_s / 1e12:.1f} TFLOP/s {result.peak_dtype} ({result.peak_source})"
            if result.peak_flops_per_s else f"n/a: {result.peak_source}")
    rows = [
        ("device", f"{result.device_name} ({result.device}), torch {result.torch_version}"),
        ("model", f"{result.model}: {result.shape.describe()}"),
        ("parameters", (f"{result.params:,} without position embeddings "
                        f"({result.params_with_position_embeddings:,} with)")),
        ("step", ", ".join(settings)),
        ("FLOP per token", f"{_scientific(result.flops_per_token)} = {result.flops_formula}"),
        ("tokens", f"{result.batch_size} × {result.shape.block_size} = {result.tokens_per_step:,} per step"
                   + (f"; × {result.grad_accum} = {result.tokens_per_iter:,} per iteration"
                      if result.grad_accum > 1 else "")),
        ("warm-up", warmup),
        ("step time", (f"{result.step_seconds:.4f} s median of {result.timed_steps} ({result.timing}; "
                       f"min {result.step_seconds_min:.4f}, max {result.step_seconds_max:.4f}): forward+backward "
                       f"{result.fwd_bwd_seconds:.4f}, optimizer {result.optimizer_seconds:.4f}")),
        ("iteration", iteration),
        ("throughput", f"{result.tokens_per_s:,.0f} tokens/s, {result.achieved_flops_per_s / 1e12:.3g} TFLOP/s"),
        ("peak", peak),
        ("MFU", f"{result.mfu * 100:.1f}%" if result.mfu is not None else "n/a"),
        ("peak memory", _gib(result.peak_memory_bytes) if result.peak_memory_bytes is not None else "n/a (CPU)"),
        ("loss", f"{result.losses[0]:.4f} → {result.losses[-1]:.4f} over {len(result.losses)} steps"),
    ]
    return [f"{label:<15} {value}" for label, value in rows]


# --- gputop mfu --------------------------------------------------------------------------------------


def run_mfu_command(args: argparse.Namespace) -> int:
    shape, problem = _shape(args)
    if problem:
        return _fail(problem)
    tokens_per_iter = args.tokens_per_iter
    if tokens_per_iter is None:
        if args.batch_size is None:
            return _fail("pass --tokens-per-iter, or --batch-size (and --grad-accum) to compute it")
        tokens_per_iter = args.batch_size * shape.block_size * args.grad_accum
    gpu = args.gpu
    if args.peak_tflops is not None:
        peak = user_peak(args.peak_tflops, args.dtype)
    else:
        detected = gpu is None
        if detected:
            names = sorted(set(gpu_names()))
            if not names:
                return _fail("no NVIDIA GPU found through NVML: pass --gpu NAME or --peak-tflops")
            if len(names) > 1:
                return _fail(f"this machine has several GPU models ({', '.join(names)}): pass --gpu NAME")
            gpu = names[0]
        peak = peak_flops(gpu, args.dtype)
        if peak is None:
            match = lookup_gpu(gpu)
            if match is None:
                return _fail(f"{gpu!r} is not in gputop's peak table; pass --peak-tflops")
            return _fail(f"{match.entry.model} has no {args.dtype} peak in gputop's table; "
                         "choose another --dtype or pass --peak-tflops")
        if detected:
            peak = dataclasses.replace(peak, source=f"{gpu}, found through NVML; {peak.source}")
    estimate = estimate_mfu(shape, tokens_per_iter, args.iter_time, peak)
    explanation = (explain_nanogpt_mfu(args.nanogpt_mfu, estimate, gpu)
                   if args.nanogpt_mfu is not None else None)
    if args.json:
        print(json.dumps(_mfu_document(args, gpu, shape, estimate, explanation), indent=2))
    else:
        print("\n".join(format_mfu_report(args, shape, estimate, explanation)))
    return EXIT_OK


def _mfu_document(args, gpu: str | None, shape: GptShape, estimate, explanation: list[str] | None) -> dict:
    peak = estimate.peak
    document = {
        "schema": MFU_SCHEMA,
        "model": args.model,
        "shape": dataclasses.asdict(shape),
        "params": count_params(shape),
        "flops_per_token": estimate.flops_per_token,
        "flops_formula": formula_with_values(shape),
        "tokens_per_iter": estimate.tokens_per_iter,
        "seconds_per_iter": estimate.seconds_per_iter,
        "flops_per_iter": estimate.flops_per_iter,
        "achieved_flops_per_s": estimate.achieved_flops_per_s,
        "gpu": gpu,
        "peak_dtype": peak.dtype,
        "peak_flops_per_s": peak.flops_per_s,
        "peak_source": peak.source,
        "mfu": estimate.mfu,
        "nanogpt": None,
    }
    if args.nanogpt_mfu is not None:
        implied = args.nanogpt_mfu / 100.0 * NANOGPT_PROMISED_FLOPS
        document["nanogpt"] = {
            "reported_mfu_pct": args.nanogpt_mfu,
            "implied_flops_per_s": implied,
            "mfu_against_peak": implied / peak.flops_per_s,
            "explanation": explanation,
        }
    return document


def format_mfu_report(args, shape: GptShape, estimate, explanation: list[str] | None) -> list[str]:
    peak = estimate.peak
    rows = [
        ("model", f"{args.model}: {shape.describe()}"),
        ("parameters", f"{count_params(shape):,} without position embeddings"),
        ("FLOP per token", f"{_scientific(estimate.flops_per_token)} = {formula_with_values(shape)}"),
        ("FLOP per iter", f"{_scientific(estimate.flops_per_iter)} ({estimate.tokens_per_iter:,} tokens)"),
        ("achieved", (f"{estimate.achieved_flops_per_s / 1e12:.1f} TFLOP/s ({estimate.seconds_per_iter:g} s per "
                      f"iteration, {estimate.tokens_per_iter / estimate.seconds_per_iter:,.0f} tokens/s)")),
        ("peak", f"{peak.flops_per_s / 1e12:.1f} TFLOP/s {peak.dtype} dense ({peak.source})"),
        ("MFU", f"{estimate.mfu * 100:.1f}%"),
    ]
    lines = [f"{label:<15} {value}" for label, value in rows]
    if explanation:
        lines.append(f"nanoGPT's {args.nanogpt_mfu:g}%:")
        lines += [f"  {sentence}" for sentence in explanation]
    return lines
