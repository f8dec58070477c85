"""`gputop mfu`: a GPT run's achieved TFLOP/s and MFU from its iteration time, against the GPU's dense peak,
and why nanoGPT's own printed mfu differs (--nanogpt-mfu). Arithmetic only: nothing is sampled or trained.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

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
from tui.commands.model_shape import add_model_arguments, model_shape, scientific
from tui.commands.shared import UsageError, positive_float, positive_int
from tui.exitcodes import EXIT_OK

MFU_SCHEMA = "gputop.mfu/1"


class MfuCommand:
    name = "mfu"
    help = "achieved TFLOP/s and MFU of a GPT run from its iteration time"
    description = ("nanoGPT's FLOP count (6·N + 12·L·H·Q·T per token) over the iteration time, against "
                   "the GPU's dense peak. --nanogpt-mfu explains the mfu nanoGPT printed.")

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        add_model_arguments(parser, default_model=None)
        parser.add_argument("--tokens-per-iter", type=positive_int, metavar="N",
                            help="tokens per optimizer iteration (default: batch × block × grad-accum)")
        parser.add_argument("--batch-size", type=positive_int, metavar="B")
        parser.add_argument("--grad-accum", type=positive_int, default=1, metavar="N")
        parser.add_argument("--iter-time", type=positive_float, required=True, metavar="S",
                            help="seconds per optimizer iteration")
        parser.add_argument("--gpu", metavar="NAME", help='the GPU\'s name as nvidia-smi shows it, e.g. "NVIDIA H200" '
                                                          "(default: this machine's, found through NVML)")
        parser.add_argument("--peak-tflops", type=positive_float, metavar="TF", help="dense peak, overriding the table")
        parser.add_argument("--dtype", choices=DTYPES, default="bf16", help="which peak to use (default bf16)")
        parser.add_argument("--nanogpt-mfu", type=float, metavar="PCT", help="the mfu nanoGPT printed, e.g. 164")
        parser.add_argument("--json", action="store_true", help="print one JSON document")

    def run(self, args: argparse.Namespace) -> int:
        shape = model_shape(args)
        tokens_per_iter = args.tokens_per_iter
        if tokens_per_iter is None:
            if args.batch_size is None:
                raise UsageError("pass --tokens-per-iter, or --batch-size (and --grad-accum) to compute it")
            tokens_per_iter = args.batch_size * shape.block_size * args.grad_accum
        gpu = args.gpu
        if args.peak_tflops is not None:
            peak = user_peak(args.peak_tflops, args.dtype)
        else:
            detected = gpu is None
            if detected:
                gpu = _this_machines_gpu()
            peak = peak_flops(gpu, args.dtype)
            if peak is None:
                match = lookup_gpu(gpu)
                if match is None:
                    raise UsageError(f"{gpu!r} is not in gputop's peak table; pass --peak-tflops")
                raise UsageError(f"{match.entry.model} has no {args.dtype} peak in gputop's table; "
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


def _this_machines_gpu() -> str:
    """The one GPU model NVML sees; UsageError when it sees none or several."""
    names = sorted(set(gpu_names()))
    if not names:
        raise UsageError("no NVIDIA GPU found through NVML: pass --gpu NAME or --peak-tflops")
    if len(names) > 1:
        raise UsageError(f"this machine has several GPU models ({', '.join(names)}): pass --gpu NAME")
    return names[0]


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
        ("FLOP per token", f"{scientific(estimate.flops_per_token)} = {formula_with_values(shape)}"),
        ("FLOP per iter", f"{scientific(estimate.flops_per_iter)} ({estimate.tokens_per_iter:,} tokens)"),
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
