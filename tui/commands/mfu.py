"""`gputop mfu`: a training run's achieved TFLOP/s and MFU from its iteration time, against the GPU's dense
peak, for a model of any family (a preset, nanoGPT's custom GPT, or a Hugging Face config.json); an MFU above
100% or below 1% comes with what to check; --nanogpt-mfu explains the mfu nanoGPT printed. Arithmetic only:
nothing is sampled or trained.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from probes.models import (
    ATTENTION_CONVENTION,
    NANOGPT_PROMISED_FLOPS,
    GptShape,
    ModelShape,
    PeakFlops,
    explain_nanogpt_mfu,
    family_of,
    lookup_gpu,
    peak_flops,
    user_peak,
)
from probes.reference import MfuEstimate, estimate_mfu, gpu_names, mfu_doubts
from tui.commands.model_shape import add_model_arguments, model_label, model_shape, scientific
from tui.commands.shared import UsageError, add_peak_arguments, positive_float, positive_int
from tui.exitcodes import EXIT_OK

MFU_SCHEMA = "gputop.mfu/1"


class MfuCommand:
    name = "mfu"
    help = "achieved TFLOP/s and MFU of a training run from its iteration time"
    description = ("The model's FLOP per token (6·N + 12·L·H·Q·T: nanoGPT's count for GPT-2, torchtitan's for "
                   "Llama-shaped and mixture-of-experts models from a config.json, attention over the whole T×T "
                   "score matrix; Megatron-LM counts half of it) over the iteration time, against the GPU's dense "
                   "peak. --nanogpt-mfu explains the mfu nanoGPT printed.")

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        add_model_arguments(parser, default_model=None)
        parser.add_argument("--tokens-per-iter", type=positive_int, metavar="N",
                            help="tokens per optimizer iteration (default: batch × block × grad-accum)")
        parser.add_argument("--batch-size", type=positive_int, metavar="B")
        parser.add_argument("--grad-accum", type=positive_int, default=1, metavar="N")
        parser.add_argument("--iter-time", type=positive_float, required=True, metavar="S",
                            help="seconds per optimizer iteration")
        add_peak_arguments(parser)
        parser.add_argument("--nanogpt-mfu", type=float, metavar="PCT", help="the mfu nanoGPT printed, e.g. 164")
        parser.add_argument("--json", action="store_true", help="print one JSON document")

    def run(self, args: argparse.Namespace) -> int:
        shape = model_shape(args)
        tokens_per_iter = args.tokens_per_iter
        if tokens_per_iter is None:
            if args.batch_size is None:
                raise UsageError("pass --tokens-per-iter, or --batch-size (and --grad-accum) to compute it")
            tokens_per_iter = args.batch_size * shape.block_size * args.grad_accum
        gpu, peak = _chosen_peak(args)
        estimate = estimate_mfu(shape, tokens_per_iter, args.iter_time, peak)
        grad_accum = args.grad_accum if args.tokens_per_iter is None else None
        doubts = mfu_doubts(estimate, shape, gpu_seen=_gpu_seen(args, gpu), grad_accum=grad_accum)
        explanation = (explain_nanogpt_mfu(args.nanogpt_mfu, estimate, gpu)
                       if args.nanogpt_mfu is not None else None)
        if args.json:
            print(json.dumps(_mfu_document(args, gpu, shape, estimate, peak, doubts, explanation), indent=2))
        else:
            print("\n".join(format_mfu_report(args, shape, estimate, peak, doubts, explanation)))
        return EXIT_OK


def _chosen_peak(args: argparse.Namespace) -> tuple[str | None, PeakFlops]:
    """The GPU's name (--gpu, else NVML's) and the peak: --peak-tflops, else the table's for that GPU."""
    if args.peak_tflops is not None:
        return args.gpu, user_peak(args.peak_tflops, args.dtype)
    gpu = args.gpu if args.gpu is not None else _this_machines_gpu()
    peak = peak_flops(gpu, args.dtype)
    if peak is None:
        match = lookup_gpu(gpu)
        if match is None:
            raise UsageError(f"{gpu!r} is not in gputop's peak table; pass --peak-tflops")
        raise UsageError(f"{match.entry.model} has no {args.dtype} peak in gputop's table; "
                         "choose another --dtype or pass --peak-tflops")
    if args.gpu is None:
        peak = dataclasses.replace(peak, source=f"{gpu}, found through NVML; {peak.source}")
    return gpu, peak


def _gpu_seen(args: argparse.Namespace, gpu: str | None) -> str | None:
    """The GPU NVML reports here, to check an assumed peak against; NVML is asked only when --gpu or
    --peak-tflops stood in for it."""
    if args.gpu is None and args.peak_tflops is None:
        return gpu
    names = sorted(set(gpu_names()))
    return names[0] if len(names) == 1 else None


def _this_machines_gpu() -> str:
    """The one GPU model NVML sees; UsageError when it sees none or several."""
    names = sorted(set(gpu_names()))
    if not names:
        raise UsageError("no NVIDIA GPU found through NVML: pass --gpu NAME or --peak-tflops")
    if len(names) > 1:
        raise UsageError(f"this machine has several GPU models ({', '.join(names)}): pass --gpu NAME")
    return names[0]


def _mfu_document(args, gpu: str | None, shape: ModelShape, estimate: MfuEstimate, peak: PeakFlops,
                  doubts: tuple[str, ...], explanation: list[str] | None) -> dict:
    """The --json document; `peak` is the estimate's (the command always has one)."""
    family = family_of(shape)
    document = {
        "schema": MFU_SCHEMA,
        "model": model_label(args),
        "family": family.name,
        "shape": dataclasses.asdict(shape),
        "params": family.params(shape),
        "active_params": family.active_params(shape),
        "flops_per_token": estimate.flops_per_token,
        "flops_formula": family.formula_with_values(shape),
        "flops_attention": ATTENTION_CONVENTION,
        "tokens_per_iter": estimate.tokens_per_iter,
        "seconds_per_iter": estimate.seconds_per_iter,
        "flops_per_iter": estimate.flops_per_iter,
        "achieved_flops_per_s": estimate.achieved_flops_per_s,
        "gpu": gpu,
        "peak_dtype": peak.dtype,
        "peak_flops_per_s": peak.flops_per_s,
        "peak_source": peak.source,
        "mfu": estimate.mfu,
        "mfu_doubts": list(doubts),
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


def _parameters(shape: ModelShape) -> str:
    family = family_of(shape)
    total, active = family.params(shape), family.active_params(shape)
    if isinstance(shape, GptShape):
        return f"{total:,} without position embeddings"
    if active != total:
        return f"{total:,}, {active:,} active per token"
    return f"{total:,}"


def format_mfu_report(args, shape: ModelShape, estimate: MfuEstimate, peak: PeakFlops, doubts: tuple[str, ...],
                      explanation: list[str] | None) -> list[str]:
    """The plain-text report; `peak` is the estimate's (the command always has one)."""
    assert estimate.mfu is not None  # a peak, always above zero (--peak-tflops or the table), gives an MFU
    family = family_of(shape)
    flagged = " (cannot be right: see below)" if doubts else ""
    rows = [
        ("model", f"{model_label(args)}: {shape.describe()}"),
        ("parameters", _parameters(shape)),
        ("FLOP per token", f"{scientific(estimate.flops_per_token)} = {family.formula_with_values(shape)}"),
        ("attention", ATTENTION_CONVENTION),  # the convention the formula line counts by
        ("FLOP per iter", f"{scientific(estimate.flops_per_iter)} ({estimate.tokens_per_iter:,} tokens)"),
        ("achieved", (f"{estimate.achieved_flops_per_s / 1e12:.1f} TFLOP/s ({estimate.seconds_per_iter:g} s per "
                      f"iteration, {estimate.tokens_per_iter / estimate.seconds_per_iter:,.0f} tokens/s)")),
        ("peak", f"{peak.flops_per_s / 1e12:.1f} TFLOP/s {peak.dtype} dense ({peak.source})"),
        ("MFU", f"{estimate.mfu * 100:.1f}%{flagged}"),
    ]
    lines = [f"{label:<15} {value}" for label, value in rows]
    lines += [f"  {sentence}" for sentence in doubts]
    if explanation:
        lines.append(f"nanoGPT's {args.nanogpt_mfu:g}%:")
        lines += [f"  {sentence}" for sentence in explanation]
    return lines
