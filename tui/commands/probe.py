"""`gputop probe`: time a reference training step (nanoGPT's GPT or a Llama-shaped model) on this machine and
print the report; ``--layers N`` builds N of the layers and says on screen that the times were scaled.

torch is imported only when the probe runs (probes/reference/gpt_probe.py), so the rest of gputop works without it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from probes.models.convention import ATTENTION_CONVENTION
from probes.reference.gpt_probe import (
    DTYPE_CHOICES,
    TORCH_MISSING,
    ProbeConfig,
    ProbeInputError,
    ProbeOutOfMemory,
    run_probe,
    torch_available,
)
from tui.commands.model_shape import add_model_arguments, model_label, model_shape, scientific
from tui.commands.shared import UsageError, add_peak_tflops_argument, positive_int
from tui.exitcodes import EXIT_OK

DEFAULT_BATCH_SIZE = 12  # nanoGPT's train_gpt2 config
DEFAULT_BATCH_SIZE_BY_MODEL = {"tiny": 8}


class ProbeCommand:
    name = "probe"
    help = "time a reference training step at a model's shape on this GPU (needs torch)"
    description = ("Train a model of the given shape (nanoGPT's GPT, or Llama-shaped from a preset or a "
                   "config.json) for a few steps on synthetic tokens and report step "
                   "time, tokens/s, achieved TFLOP/s and MFU. Compare with your job's own iteration time: "
                   "the same shape taking much longer there is time lost outside the model.")

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        add_model_arguments(parser, default_model="gpt2")
        parser.add_argument("--batch-size", type=positive_int, metavar="B",
                            help=f"sequences per micro-step (default {DEFAULT_BATCH_SIZE}; tiny: 8)")
        parser.add_argument("--grad-accum", type=positive_int, default=1, metavar="N",
                            help="micro-steps per optimizer iteration, for the predicted iteration time")
        parser.add_argument("--dtype", choices=DTYPE_CHOICES, default="auto",
                            help="auto: bf16 on GPUs that have it, else fp16; fp32 on the CPU")
        parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=False,
                            help="torch.compile the model (its time is reported separately)")
        parser.add_argument("--steps", type=positive_int, default=10, help="timed steps (default 10)")
        parser.add_argument("--warmup", type=positive_int, default=3, help="untimed steps first (default 3)")
        parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
        parser.add_argument("--layers", type=positive_int, metavar="N",
                            help="build and time N of the model's layers and scale the times to all of them "
                                 "(for a model too large for this GPU)")
        add_peak_tflops_argument(parser)
        parser.add_argument("--json", action="store_true", help="print one JSON document")

    def run(self, args: argparse.Namespace) -> int:
        shape = model_shape(args)
        model = model_label(args)
        assert model is not None  # model_shape named it (the default is gpt2), or raised a UsageError
        config = ProbeConfig(
            shape=shape,
            model=model,
            batch_size=args.batch_size or DEFAULT_BATCH_SIZE_BY_MODEL.get(model, DEFAULT_BATCH_SIZE),
            grad_accum=args.grad_accum,
            dtype=args.dtype,
            compile=args.compile,
            steps=args.steps,
            warmup=args.warmup,
            device=args.device,
            peak_tflops=args.peak_tflops,
            layers=args.layers,
        )
        problem = config.problem()
        if problem:  # before the torch check: a shape the probe cannot build is said without torch too
            raise UsageError(problem)
        if not torch_available():
            raise UsageError(TORCH_MISSING)
        try:
            result = run_probe(config, say=lambda message: print(f"gputop probe: {message}", file=sys.stderr))
        except (ProbeInputError, ProbeOutOfMemory) as exc:
            raise UsageError(str(exc)) from None
        if args.json:
            print(json.dumps(dataclasses.asdict(result), indent=2))
        else:
            print("\n".join(format_probe_report(result)))
        return EXIT_OK


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
    params = f"{result.params:,}"
    if result.params_with_position_embeddings != result.params:
        params += f" without position embeddings ({result.params_with_position_embeddings:,} with)"
    rows = [
        ("device", f"{result.device_name} ({result.device}), torch {result.torch_version}"),
        ("model", f"{result.model}: {result.shape.describe()}"),
        ("parameters", params),
        ("step", ", ".join(settings)),
        *([("scaled", result.scaling)] if result.scaling else []),
        ("FLOP per token", f"{scientific(result.flops_per_token)} = {result.flops_formula}"),
        ("attention", ATTENTION_CONVENTION),  # the convention the formula line counts by
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
    if result.other_load is not None:
        rows.append(("other load", other_load_words(result.other_load)))
    return [f"{label:<15} {value}" for label, value in rows]


def other_load_words(load) -> str:
    """The machine's other load around the timed steps: "quiet: ..." or "NOT A CLEAN BASELINE: ..."."""
    figures = ", ".join(f"{name} {value:.1f}" for name, value in (
        ("before", load.others_cpus_before), ("during", load.others_cpus_during), ("after", load.others_cpus_after))
        if value is not None)
    of = f" of {load.allowed_cpus}" if load.allowed_cpus else ""
    cpus = f"other processes' CPUs{of}: {figures}" if figures else "host CPU not read"
    if not load.clean:  # the note carries the figures
        return f"NOT A CLEAN BASELINE: {load.note.removeprefix('not a clean baseline: ')}"
    gpu = "no other process on its GPU" if load.gpu_reason is None else f"GPU not checked: {load.gpu_reason}"
    return f"quiet ({cpus}; {gpu})"
