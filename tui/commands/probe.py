"""`gputop probe`: time a reference training step (nanoGPT's GPT or a Llama-shaped model) on this machine and
print the report; ``--layers N`` builds N of the layers and says on screen that the times were scaled.
``--like PID`` times it at a running job's own model, sequence length, micro-batch, accumulation, dtype and compile
setting, each read from the job and said before the run (probes/reference/like_job.py), never on a GPU the job uses.

torch is imported only when the probe runs (probes/reference/gpt_probe.py), so the rest of gputop works without it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

from probes.models import ATTENTION_CONVENTION, SettingName
from probes.reference import (
    DTYPE_CHOICES,
    TORCH_MISSING,
    Given,
    LikeJobError,
    LikePlan,
    ProbeConfig,
    ProbeInputError,
    ProbeOutOfMemory,
    plan_like,
    run_probe,
    setting_lines,
    torch_available,
)
from tui.commands.model_shape import add_model_arguments, model_label, model_shape, scientific
from tui.commands.shared import UsageError, add_peak_tflops_argument, pid, positive_int
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
        # Defaults are None, applied in run(): with --like only a flag the user gave replaces the job's setting.
        parser.add_argument("--no-bias", dest="bias", action="store_false",
                            help="no biases (with --like: for a job whose bias gputop cannot read)")
        parser.set_defaults(bias=None)
        parser.add_argument("--like", type=pid, metavar="PID",
                            help="time the step at this running job's own model, sequence length, micro-batch, "
                                 "accumulation, dtype and compile setting, read from its command line and config "
                                 "(nanoGPT's train.py, a Hugging Face config.json) and said before the run; any "
                                 "flag given replaces the job's setting. Refuses a GPU the job uses")
        parser.add_argument("--batch-size", type=positive_int, metavar="B",
                            help=f"sequences per micro-step (default {DEFAULT_BATCH_SIZE}; tiny: 8)")
        parser.add_argument("--grad-accum", type=positive_int, metavar="N",
                            help="micro-steps per optimizer iteration, for the predicted iteration time (default 1)")
        parser.add_argument("--dtype", choices=DTYPE_CHOICES,
                            help="auto (the default): bf16 on GPUs that have it, else fp16; fp32 on the CPU")
        parser.add_argument("--compile", action=argparse.BooleanOptionalAction,
                            help="torch.compile the model (its time is reported separately; default off)")
        parser.add_argument("--steps", type=positive_int, default=10, help="timed steps (default 10)")
        parser.add_argument("--warmup", type=positive_int, default=3, help="untimed steps first (default 3)")
        parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
        parser.add_argument("--layers", type=positive_int, metavar="N",
                            help="build and time N of the model's layers and scale the times to all of them "
                                 "(for a model too large for this GPU)")
        add_peak_tflops_argument(parser)
        parser.add_argument("--json", action="store_true", help="print one JSON document")

    def run(self, args: argparse.Namespace) -> int:
        def say(message: str) -> None:
            print(f"gputop probe: {message}", file=sys.stderr)

        like = None
        if args.like is not None:
            plan = _plan_like(args)
            like = plan.like
            for line in setting_lines(like):
                say(line)
            shape, model, batch_size, grad_accum = plan.shape, plan.model, plan.batch_size, plan.grad_accum
            dtype, compile_model = plan.dtype, plan.compile
        else:
            shape = model_shape(args)
            named = model_label(args)
            assert named is not None  # model_shape named it (the default is gpt2), or raised a UsageError
            model = named
            batch_size = args.batch_size or DEFAULT_BATCH_SIZE_BY_MODEL.get(model, DEFAULT_BATCH_SIZE)
            grad_accum, dtype, compile_model = args.grad_accum or 1, args.dtype or "auto", bool(args.compile)
        config = ProbeConfig(
            shape=shape,
            model=model,
            batch_size=batch_size,
            grad_accum=grad_accum,
            dtype=dtype,
            compile=compile_model,
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
            result = run_probe(config, say=say)
        except (ProbeInputError, ProbeOutOfMemory) as exc:
            raise UsageError(str(exc)) from None
        if like is not None:
            result = dataclasses.replace(result, like=like)
        if args.json:
            print(json.dumps(dataclasses.asdict(result), indent=2))
        else:
            print("\n".join(format_probe_report(result)))
        return EXIT_OK


def _given(args: argparse.Namespace) -> dict[SettingName, Given]:
    """The flags given beside --like, each as the probe takes it and as it was written."""
    given: dict[SettingName, Given] = {}
    if args.config is not None or args.model is not None:
        flag = "--config" if args.config is not None else "--model"
        given["model"] = Given(args.config or args.model, f"{flag} {args.config or args.model}")
    numbers: tuple[SettingName, ...] = ("n_layer", "n_head", "n_embd", "vocab_size", "block_size", "batch_size",
                                        "grad_accum")
    for name in numbers:
        if getattr(args, name) is not None:
            given[name] = Given(getattr(args, name), f"--{name.replace('_', '-')} {getattr(args, name)}")
    if args.bias is not None:
        given["bias"] = Given(args.bias, "--bias" if args.bias else "--no-bias")
    if args.dtype is not None:
        given["dtype"] = Given(args.dtype, f"--dtype {args.dtype}")
    if args.compile is not None:
        given["compile"] = Given(args.compile, "--compile" if args.compile else "--no-compile")
    return given


def _plan_like(args: argparse.Namespace) -> LikePlan:
    """The job's settings against the flags given (UsageError, one line, when the probe cannot time its step)."""
    if args.config is not None and args.model is not None:
        raise UsageError("pass --model or --config, not both")
    if args.model == "custom":
        raise UsageError("--like reads the job's model: change part of it with --n-layer, --n-head, --n-embd, "
                         "--vocab-size, --block-size, or name another with --model PRESET or --config config.json")
    try:
        return plan_like(args.like, _given(args), args.device, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except LikeJobError as exc:
        raise UsageError(str(exc)) from None


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
                       f"min {result.step_seconds_min:.4f}, max {result.step_seconds_max:.4f}); medians of its parts: "
                       f"forward+backward {result.fwd_bwd_seconds:.4f}, optimizer {result.optimizer_seconds:.4f}")),
        ("iteration", iteration),
        ("throughput", f"{result.tokens_per_s:,.0f} tokens/s, {result.achieved_flops_per_s / 1e12:.3g} TFLOP/s"),
        ("peak", peak),
        ("MFU", f"{result.mfu * 100:.1f}%" if result.mfu is not None else "n/a"),
        ("peak memory", _gib(result.peak_memory_bytes) if result.peak_memory_bytes is not None else "n/a (CPU)"),
        ("loss", f"{result.losses[0]:.4f} → {result.losses[-1]:.4f} over {len(result.losses)} steps"),
    ]
    if result.like is not None:
        given = f"; given: {', '.join(result.like.given)}" if result.like.given else ""
        rows.insert(2, ("like", f"PID {result.like.pid} ({result.like.command}): its settings, read from "
                                f"{result.like.reader}{given}"))
        rows.insert(3, ("GPU check", result.like.gpu_check))
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
