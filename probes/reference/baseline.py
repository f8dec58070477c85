"""The target's observed pace against a baseline: the probe's reference step, and MFU from the log.

A baseline is the JSON ``gputop probe --json`` writes (schema ``gputop.probe/1``): the time the same model
takes per step on synthetic data already on the device. ``load_baseline`` reads one and says in one line
what is wrong with a file that is not one.

``compare_progress`` is pure: given the latest ProgressReading (from the target's log) and the fixed
inputs of the run (baseline, ``--model``, ``--tokens-per-iter``) it says how the observed seconds per
iteration compare with the reference's predicted iteration, what share of the time goes outside the
model's compute (input pipeline, host work, communication), and the MFU recomputed from the observed
tokens/s next to the MFU the log printed, with nanoGPT's divide-by-312 explained when they differ.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

from probes.frame import Frame, ProgressReading, from_jsonable
from probes.logformats import known_format
from probes.models import FAMILIES, ModelShape, family_of
from probes.models.gpt2 import NANOGPT_PROMISED_FLOPS, explain_nanogpt_mfu
from probes.models.hf_config import ModelConfigError, named_shape
from probes.models.mfu import MfuEstimate, estimate_mfu, mfu_doubts
from probes.models.peaks import PeakFlops, peak_flops, user_peak
from probes.models.stated import StatedModel
from probes.reference.gpt_probe import PROBE_SCHEMA, ProbeResult

HOW_TO_WRITE = "write one with: gputop probe --model MODEL --json > FILE"

# Beyond these ratios the printed and the recomputed MFU are telling different stories.
MFU_AGREEMENT = (0.8, 1.25)
# gputop's achieved FLOP/s within this of a whole number (≥ 2) of the log's per-GPU figure: the tokens per
# iteration given are that many GPUs' (tighter than MFU_AGREEMENT, so 2.6× is not called 3 GPUs).
GPU_MULTIPLE_TOLERANCE = 0.1
# A job up to this much faster than the reference is within the probe's own noise, not beyond it.
FASTER_THAN_REFERENCE_NOISE_PCT = 105.0
# A job at this much of the reference's rate or more has nothing in its step left to win (the rest is the
# probe's own noise); below it, the time outside the model's compute is named.
NOTHING_TO_WIN_PCT = 95.0
# The baseline's FLOPs per token within this of the job's model: the same model (a probe's vocab is padded to
# 64, a job's solved from its printed parameter count), so its step is the job's reference.
SAME_MODEL_FLOPS = 0.02

_POSITIVE_SECONDS = ("iter_seconds", "fwd_bwd_seconds", "optimizer_seconds", "step_seconds")
_POSITIVE_COUNTS = ("tokens_per_step", "tokens_per_iter", "batch_size", "grad_accum", "flops_per_token")


class BaselineError(ValueError):
    """A baseline file that cannot be used; the message is one line a person can act on."""


def load_baseline(path: str) -> ProbeResult:
    """The probe result stored at path; BaselineError (one line) when it is missing or not one."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise BaselineError(f"cannot read the baseline {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise BaselineError(f"the baseline {path} is not a text file; {HOW_TO_WRITE}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(f"the baseline {path} is not JSON ({exc.msg} at line {exc.lineno}); "
                            f"{HOW_TO_WRITE}") from None
    return baseline_from_data(data, path)


def baseline_from_data(data, path: str) -> ProbeResult:
    """The probe result in `data` (a probe's JSON, read from a file or carried in a recording's header, `path`
    naming where); BaselineError (one line) when it is not one."""
    if not isinstance(data, dict) or data.get("schema") != PROBE_SCHEMA:
        raise BaselineError(f"the baseline {path} is not a gputop probe result (no \"schema\": "
                            f"\"{PROBE_SCHEMA}\"); {HOW_TO_WRITE}")
    required = [f.name for f in dataclasses.fields(ProbeResult)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [name for name in required if name not in data]
    if missing:
        raise BaselineError(f"the baseline {path} lacks {', '.join(missing)}; {HOW_TO_WRITE}")
    problem = _value_problem(data)
    if problem:
        raise BaselineError(f"the baseline {path} has {problem}; {HOW_TO_WRITE}")
    try:
        # The shape's dataclass depends on the family, which from_jsonable cannot see: built here.
        shape_type = _shape_type(data)
        assert shape_type is not None  # else _value_problem named the unknown family
        return dataclasses.replace(from_jsonable(ProbeResult, data), shape=shape_type(**data["shape"]))
    except (TypeError, ValueError) as exc:  # e.g. a shape with missing or unknown fields
        raise BaselineError(f"the baseline {path} is malformed ({exc}); {HOW_TO_WRITE}") from None


def _shape_type(data: dict) -> type | None:
    """The shape dataclass of the family the probe built; results written before other families were GPT."""
    family = data.get("family", "gpt2")
    return next((f.shape_type for f in FAMILIES if f.name == family), None)


def _value_problem(data: dict) -> str | None:
    def is_number(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    for name in _POSITIVE_SECONDS:
        if not (is_number(data[name]) and data[name] > 0):
            return f"{name} = {data[name]!r} (a positive number of seconds expected)"
    for name in _POSITIVE_COUNTS:
        if not (isinstance(data[name], int) and not isinstance(data[name], bool) and data[name] > 0):
            return f"{name} = {data[name]!r} (a positive whole number expected)"
    peak = data["peak_flops_per_s"]
    if peak is not None and not (is_number(peak) and peak > 0):
        return f"peak_flops_per_s = {peak!r}"
    shape = data["shape"]
    if not isinstance(shape, dict):
        return f"shape = {shape!r} (an object expected)"
    shape_type = _shape_type(data)
    if shape_type is None:
        return f"family = {data.get('family')!r} (one of {', '.join(f.name for f in FAMILIES)} expected)"
    try:
        shape_problem = shape_type(**shape).problem()
    except TypeError:
        fields = ", ".join(f.name for f in dataclasses.fields(shape_type))
        return f"a shape without the fields {fields}: {shape!r}"
    return f"an impossible shape: {shape_problem}" if shape_problem else None


# --- what a run compares against ---------------------------------------------------------------------


@dataclass(frozen=True)
class PeakOptions:
    """What the user said about the peak (--gpu, --peak-tflops, --dtype); None: not said."""

    gpu: str | None = None  # the GPU to take from the table instead of the one NVML reports
    tflops: float | None = None  # a dense peak given outright
    dtype: str | None = None  # which of the GPU's peaks


@dataclass(frozen=True)
class ComparisonInputs:
    """What the observed progress of one run is compared with; fixed for the run (command-line options)."""

    baseline: ProbeResult | None = None
    baseline_path: str | None = None
    shape: ModelShape | None = None  # the model's shape: --model's preset, else the baseline's
    model: str | None = None
    tokens_per_iter: int | None = None  # --tokens-per-iter, else what the job's command line states
    peak: PeakOptions = PeakOptions()
    stated_by: str | None = None  # where the shape came from when the job stated it, not the options
    tokens_source: str = "--tokens-per-iter"  # where tokens_per_iter came from, said beside tokens/s
    notes: tuple[str, ...] = ()  # an option given over what the job states, said with the pace
    no_mfu_why: str | None = None  # why gputop cannot count the FLOPs, what to pass (where the generic line is not it)


def load_comparison_inputs(baseline_path: str | None, model: str | None, tokens_per_iter: int | None,
                           peak: PeakOptions | None = None, stated: StatedModel | None = None,
                           baseline: ProbeResult | None = None) -> ComparisonInputs | None:
    """The inputs the options give, or None when they give nothing to compare with (no baseline, no model,
    and no model the job states itself). BaselineError (one line) for a bad baseline file, an unknown model
    or unreadable config.json, or a --model that is not the model the baseline was probed with.

    `stated` is what the job says of itself (its command line live, a recording's header on replay): the job's
    own figures win over a baseline's, which was probed at a batch of its own. Its tokens per iteration count
    unless --tokens-per-iter is given, its shape unless --model is; an option given over a different figure of
    the job's is said (`notes`). `baseline` is a probe result already read (a recording carries the one it was
    compared with), used when `baseline_path` names none."""
    tokens = tokens_per_iter if tokens_per_iter and tokens_per_iter > 0 else None
    if baseline_path:
        baseline = load_baseline(baseline_path)
    shape = None
    stated_by = None
    notes = []
    if model is not None:
        try:
            shape = named_shape(model)
        except ModelConfigError as exc:
            raise BaselineError(str(exc)) from None
        if baseline is not None and baseline.shape != shape:
            raise BaselineError(f"--model {model} ({shape.describe()}) is not the model the baseline "
                                f"{baseline_path or 'recorded'} was probed with ({baseline.model}: "
                                f"{baseline.shape.describe()})")
        if stated is not None and stated.shape != shape:
            notes.append(f"--model {model} is used, not the shape of {stated.source} ({stated.shape.describe()}).")
    elif stated is not None:  # the job's own shape, over the baseline's (a probe of the same model, its vocab padded)
        shape, model, stated_by = stated.shape, stated.model, stated.source
    if baseline is not None and shape is None:
        shape, model = baseline.shape, baseline.model
    elif baseline is not None and stated_by is None:
        model = baseline.model  # --model named the baseline's own shape
    tokens_source = "--tokens-per-iter"
    if stated is not None and stated.tokens_per_iter:
        if tokens is None:
            tokens, tokens_source = stated.tokens_per_iter, stated.tokens_source or "as the job states"
        elif tokens != stated.tokens_per_iter:
            notes.append(f"--tokens-per-iter {tokens:,} is used, not the {stated.tokens_per_iter:,} of "
                         f"{stated.tokens_source or stated.source}.")
    if shape is None:
        return None
    return ComparisonInputs(baseline=baseline, baseline_path=baseline_path if baseline is not None else None,
                            shape=shape, model=model, tokens_per_iter=tokens, peak=peak or PeakOptions(),
                            stated_by=stated_by, tokens_source=tokens_source, notes=tuple(notes))


# --- the comparison ----------------------------------------------------------------------------------


def reference_settings(baseline: ProbeResult) -> str:
    """What the reference step does, the levers it pulls besides compiling (said as its kind, "compiled reference"):
    "bf16, fused AdamW, SDPA, micro-batch 16". A job at its rate has those levers' gains; the ones it does not try
    (FP8, CUDA graphs, another micro-batch or attention kernel) it says nothing of."""
    dtype = baseline.dtype + (" with TF32" if baseline.dtype == "fp32" and baseline.tf32 else "")
    return ", ".join((dtype, "fused AdamW" if baseline.fused_adamw else "AdamW", "SDPA",
                      f"micro-batch {baseline.batch_size}"))


@dataclass(frozen=True)
class ProgressComparison:
    """Observed progress against the baseline and the peak; percentages are 0-100."""

    observed_seconds_per_iter: float
    tokens_per_iter: int | None = None
    # Always false now: gputop once took the probe's tokens per iteration for an unknown job's and set its claims on
    # them (issue 29); the key stays for the readers of the snapshots those versions wrote.
    tokens_per_iter_assumed: bool = False
    observed_tokens_per_s: float | None = None
    baseline_path: str | None = None
    reference_device: str | None = None  # where the probe ran
    reference_seconds_per_iter: float | None = None  # predicted for this run's tokens per iteration
    reference_grad_accum: float | None = None  # micro-steps of the probe's batch in one iteration
    reference_compiled: bool | None = None  # whether the probe's step ran under torch.compile
    reference_settings: str | None = None  # what the reference step does (reference_settings())
    # The job runs at NOTHING_TO_WIN_PCT or more of a reference probed on its own GPU (read, not assumed): decided here
    # once, for the pace's words, the advice that replaces the levers, and the exporter.
    nothing_to_win: bool = False
    compute_bound_pct: float | None = None  # reference / observed
    other_cost_pct: float | None = None  # time outside the model's compute; None when faster than the probe
    model: str | None = None
    flops_per_token: int | None = None
    achieved_flops_per_s: float | None = None
    peak_flops_per_s: float | None = None
    peak_dtype: str | None = None
    peak_source: str | None = None
    corrected_mfu_pct: float | None = None  # observed tokens/s × FLOP per token / peak
    # Where corrected_mfu_pct's FLOPs come from when gputop could not count them itself: "nanoGPT's own count" for
    # nanoGPT's printed mfu re-based to the real peak (the same formula as gputop's, so the same figure); None when
    # gputop counted them from the shape.
    mfu_basis: str | None = None
    reported_mfu_pct: float | None = None  # what the log printed
    reported_tflops_per_gpu: float | None = None  # achieved TFLOP/s per GPU as the log printed it (Megatron-LM)
    lines: tuple[str, ...] = ()


def printed_percent(value: float) -> str:
    """An MFU the log printed: whole percent from 10% up ("164"), below that with the decimals it printed
    (nanoGPT's {:.2f}) and no trailing zeros ("3.4", "0.01"). Rounded to whole percent, 0.01% read "0%" on screen,
    which looks like a bug in gputop; 164.31% needs no decimals, and they would wrap the pace line at 80 columns."""
    if abs(value) >= 10:
        return f"{value:.0f}"
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def mfu_percent(value: float) -> str:
    """An MFU gputop worked out: as printed_percent, and two significant figures for a figure below 0.01%."""
    text = printed_percent(value)
    return text if text != "0" or value == 0 else f"{value:.2g}"


def compact_count(value: float | None) -> str:
    """A count in three significant figures with its SI letter: 1.01M tokens/s, 300M FLOPs per token; "—" for
    unknown."""
    if value is None:
        return "—"
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def target_gpu_name(frame: Frame) -> str | None:
    """The name of the GPU the target runs on: its devices', else the machine's when all GPUs are one
    model; None when unknown or ambiguous."""
    devices = frame.gpu.devices
    names = {d.name for d in devices if d.in_target and d.name} or {d.name for d in devices if d.name}
    return names.pop() if len(names) == 1 else None


def _number(value: float) -> str:
    """21.0, 20.4, 2.35, 0.305: three significant figures, keeping the decimal of 21.0."""
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _flops(value: float) -> str:
    return f"{value / 1e12:.1f} TFLOP/s" if value >= 1e11 else f"{value / 1e9:.3g} GFLOP/s"


def _reference(baseline: ProbeResult, tokens_per_iter: int) -> tuple[float, float]:
    """(predicted seconds, micro-steps) for one iteration of tokens_per_iter, as nanoGPT's loop runs it:
    micro-steps × forward+backward + one optimizer step. The probe's own iteration when tokens agree."""
    if tokens_per_iter == baseline.tokens_per_iter:
        return baseline.iter_seconds, float(baseline.grad_accum)
    return reference_iteration(tokens_per_iter, baseline.tokens_per_step, baseline.fwd_bwd_seconds,
                               baseline.optimizer_seconds)


def reference_iteration(tokens_per_iter: int, probe_tokens_per_step: int, fwd_bwd_seconds: float,
                        optimizer_seconds: float) -> tuple[float, float]:
    """(seconds, micro-steps) the probe's step predicts for a job's iteration of tokens_per_iter: the job's tokens
    in micro-steps of the probe's batch, each one forward+backward, and one optimizer step per iteration (the probe
    pays that step every batch, so its own rate would flatter a job that accumulates). The one formula, for the
    live pace (compare_progress) and `gputop compare` alike."""
    micro_steps = tokens_per_iter / probe_tokens_per_step
    return micro_steps * fwd_bwd_seconds + optimizer_seconds, micro_steps


def _peak(inputs: ComparisonInputs, gpu_name: str | None) -> PeakFlops | None:
    """--peak-tflops; else the baseline's peak when it ran on the target's GPU (or the target's is unknown)
    and no --gpu names another; else the table's for --gpu or the target's GPU."""
    asked, baseline = inputs.peak, inputs.baseline
    if asked.tflops is not None:
        return user_peak(asked.tflops, asked.dtype or "bf16")
    gpu = asked.gpu or gpu_name
    if baseline is not None and baseline.peak_flops_per_s and (gpu is None or gpu == baseline.device_name) \
            and asked.dtype in (None, baseline.peak_dtype):
        return PeakFlops(baseline.peak_flops_per_s, baseline.peak_dtype, baseline.peak_source)
    gpu_dtype = asked.dtype or (baseline.peak_dtype if baseline is not None and baseline.device != "cpu" else "bf16")
    peak = peak_flops(gpu, gpu_dtype)
    if peak is not None and asked.gpu:
        return dataclasses.replace(peak, source=f"--gpu {asked.gpu!r}, {peak.source}")
    return peak


def _same_model(probed: ModelShape, job: ModelShape) -> bool:
    """Whether the probe's shape is the job's model, by what a token costs (the vocabularies may differ by padding)."""
    ours, theirs = family_of(probed).flops_per_token(probed), family_of(job).flops_per_token(job)
    return abs(ours / theirs - 1) <= SAME_MODEL_FLOPS


def compare_progress(progress: ProgressReading | None, inputs: ComparisonInputs | None,
                     gpu_name: str | None = None) -> ProgressComparison | None:
    """The observed pace against the inputs; None until the log gives a time per iteration, or when the
    inputs give nothing to compare with. gpu_name: the target's GPU (target_gpu_name), for the peak."""
    if progress is None or inputs is None or not progress.seconds_per_iter or progress.seconds_per_iter <= 0:
        return None
    observed = progress.seconds_per_iter
    baseline = inputs.baseline
    # The job's own tokens per iteration (or --tokens-per-iter), never the probe's: a probe runs a batch of its own,
    # and its 16,384 taken for a job's 131,072 made a run at 53% MFU read "6.64% MFU, ~87% lost outside the model".
    tokens = inputs.tokens_per_iter
    tokens_per_s = tokens / observed if tokens else None
    lines = []
    other_model = baseline is not None and inputs.shape is not None and not _same_model(baseline.shape, inputs.shape)

    reference = micro_steps = compute_bound = other = None
    nothing_to_win = False
    if baseline is not None and tokens and not other_model:
        reference, micro_steps = _reference(baseline, tokens)
        compute_bound = 100.0 * reference / observed
        head = f"observed {_number(observed)} s/iter; reference {_number(reference)} s for {tokens:,} tokens"
        kind = "compiled" if baseline.compiled else "eager"
        if gpu_name and gpu_name != baseline.device_name:  # a reference of another GPU says nothing of this one's
            lines.append(f"{head}: {compute_bound:.0f}% of {baseline.device_name}'s {kind} reference's rate.")
        elif compute_bound > FASTER_THAN_REFERENCE_NOISE_PCT:
            lines.append(f"{head}: the job runs {compute_bound / 100:.2g}× as fast as the probe's step "
                         "(torch.compile, a larger micro-batch or another dtype?), so the probe is no bound for it.")
        else:
            other = max(0.0, 100.0 - compute_bound)
            where = "this GPU's" if gpu_name else f"{baseline.device_name}'s"
            said = (f"{head}: the job runs at {compute_bound:.0f}% of {where} {kind} reference for its model "
                    f"({reference_settings(baseline)}): ")
            if compute_bound < NOTHING_TO_WIN_PCT:
                # The gap is the job's time beyond the reference step's; what fills it is not measured here: work
                # outside the model, or settings the reference does not share (another dtype, micro-batch, compile).
                said += (f"~{other:.0f}% of the job's time is beyond the reference step's: work outside the model "
                         "(the input pipeline, logging, evaluation) or settings the reference does not share; "
                         "gputop probe --like PID times the job's own settings.")
            elif gpu_name:  # the reference ran on the target's own GPU
                said += "the reference's own levers have nothing left to win here."
                nothing_to_win = True
            else:  # the target's GPU was not read: the reference holds only if it is the same
                said += (f"the reference's own levers have nothing left to win if the job runs on "
                         f"{baseline.device_name} too (its GPU was not read).")
            lines.append(said)
    elif other_model:
        assert baseline is not None and inputs.shape is not None  # other_model compares the two
        lines.append(f"observed {_number(observed)} s/iter; the baseline was probed with {baseline.model} "
                     f"({baseline.shape.describe()}), not the job's model ({inputs.shape.describe()}): its step is "
                     "no reference for this job.")
    elif baseline is not None:
        lines.append(f"observed {_number(observed)} s/iter; the job's tokens per iteration are not known, so it "
                     f"cannot be set against the reference step ({baseline.tokens_per_iter:,} tokens in "
                     f"{_number(baseline.iter_seconds)} s on {baseline.device_name}): pass --tokens-per-iter N for "
                     "the comparison, tokens/s and the MFU.")
    else:
        lines.append(f"observed {_number(observed)} s/iter.")
    if baseline is not None and not other_model:  # what the reference is, whether or not it could be used
        how = f"grad-accum {baseline.grad_accum}"
        if micro_steps is not None and tokens != baseline.tokens_per_iter:
            how = (f"{micro_steps:g} × {_number(baseline.fwd_bwd_seconds)} s forward+backward of "
                   f"{baseline.tokens_per_step:,} tokens + {_number(baseline.optimizer_seconds)} s optimizer, "
                   "assuming the probe's micro-batch")
        lines.append(f"Reference: gputop probe of {baseline.model} on {baseline.device_name} ({how}).")
        if gpu_name and gpu_name != baseline.device_name:
            lines.append(f"The baseline ran on {baseline.device_name}, the target on {gpu_name}: "
                         "the reference does not hold for this GPU.")
        if baseline.other_load is not None and not baseline.other_load.clean and baseline.other_load.note:
            # A reference timed beside other work is slower than the machine's own: the job looks better than it is.
            lines.append("The baseline was timed beside other work: "
                         f"{baseline.other_load.note.removeprefix('not a clean baseline: ')}.")

    if tokens_per_s is not None:
        lines.append(f"{tokens_per_s:,.0f} tokens/s ({tokens:,} tokens per iteration, {inputs.tokens_source}).")

    gpu = gpu_name or (baseline.device_name if baseline is not None and baseline.device != "cpu" else None)
    estimate: MfuEstimate | None = None
    if tokens and inputs.shape is not None:
        estimate = estimate_mfu(inputs.shape, tokens, observed, _peak(inputs, gpu_name))
    corrected = estimate.mfu * 100.0 if estimate is not None and estimate.mfu is not None else None
    reported = progress.reported_mfu_pct
    printed = (f"; the log printed {printed_percent(reported)}%{_how_the_log_counts(progress.format)}"
               if reported is not None else "")
    # Without the shape gputop cannot count the FLOPs, but nanoGPT has: its printed mfu is its own 6·N + 12·L·H·Q·T
    # (gputop's convention) over 312 TFLOP/s, so re-based to the GPU's real peak it is the MFU, on nanoGPT's count.
    rebased_peak = _peak(inputs, gpu_name) if estimate is None and progress.format == "nanogpt" \
        and reported is not None and reported > 0 else None
    if rebased_peak is not None and reported is not None:
        corrected = reported / 100.0 * NANOGPT_PROMISED_FLOPS / rebased_peak.flops_per_s * 100.0
        lines.append(f"MFU {corrected:.1f}% by nanoGPT's own FLOP count: the log's {printed_percent(reported)}% × "
                     f"{NANOGPT_PROMISED_FLOPS / 1e12:.0f} / {rebased_peak.flops_per_s / 1e12:.1f} TFLOP/s, "
                     f"{inputs.peak.gpu or gpu or 'the GPU'}'s {rebased_peak.dtype} dense peak. gputop's own count "
                     + (f"needs the shape: {inputs.no_mfu_why}." if inputs.no_mfu_why else
                        "needs the shape: pass --model PRESET or config.json."))
    elif estimate is None:
        if inputs.no_mfu_why is not None:
            lines.append(f"No MFU: {inputs.no_mfu_why}.")
        elif baseline is None or tokens:  # else the first line has said to pass --tokens-per-iter
            lines.append("Pass --tokens-per-iter N (and --model, or --baseline) for tokens/s and the MFU.")
    elif corrected is not None:
        # corrected is the estimate's MFU, made from the shape and a peak
        assert estimate.peak is not None and inputs.shape is not None
        lines.append(f"Corrected MFU {corrected:.1f}% ({_flops(estimate.achieved_flops_per_s)} of "
                     f"{inputs.peak.gpu or gpu or 'the GPU'}'s {_flops(estimate.peak.flops_per_s)} "
                     f"{estimate.peak.dtype} dense peak){printed}.")
        lines += mfu_doubts(estimate, inputs.shape, gpu_seen=gpu_name)
    else:
        named = inputs.peak.gpu or gpu_name
        where = (f"{named} is not in gputop's peak table; pass --peak-tflops" if named
                 else "the target's GPU is not known; pass --gpu or --peak-tflops")
        lines.append(f"{_flops(estimate.achieved_flops_per_s)} achieved; no MFU: {where}{printed}.")
    if reported is not None:
        disagree = corrected is not None and not MFU_AGREEMENT[0] <= reported / corrected <= MFU_AGREEMENT[1]
        if progress.format != "nanogpt":  # the divide-by-312 story is nanoGPT's alone
            if disagree:
                # corrected is the estimate's MFU here (only nanoGPT's is re-based): made from the shape and a peak
                assert corrected is not None and estimate is not None and estimate.peak is not None \
                    and inputs.shape is not None
                lines.append(_why_the_logs_mfu_differs(reported, corrected, inputs.shape, estimate.peak,
                                                       progress.format))
        elif disagree or (corrected is None and reported > 100):
            lines += explain_nanogpt_mfu(reported, estimate, gpu, peak=rebased_peak)
    # A framework with a peak table of its own (nanochat, torchtitan): the row it took for this GPU, flagged where
    # it is not the GPU's peak (probes/logformats/peak_tables.py).
    log_format = known_format(progress.format)
    peak_said = log_format.mfu_peak_sentence(inputs.peak.gpu or gpu, reported is not None) if log_format else None
    if peak_said is not None:
        lines.append(peak_said)
    if progress.reported_tokens_per_s is not None and log_format is not None \
            and log_format.printed_tokens_per_s_over is not None:
        lines.append(f"The log's own {progress.reported_tokens_per_s:,.0f} tokens/s: "
                     f"{log_format.printed_tokens_per_s_over}.")
    printed_tflops = progress.reported_tflops_per_gpu
    if printed_tflops is not None:
        lines.append(_printed_tflops_line(printed_tflops, estimate, progress.format, inputs.shape))

    lines += inputs.notes
    if inputs.stated_by is not None and inputs.shape is not None:
        lines.append(f"Model from {inputs.stated_by}: {inputs.shape.describe()}.")

    peak = estimate.peak if estimate is not None else rebased_peak
    per_token = estimate.flops_per_token if estimate is not None else \
        family_of(inputs.shape).flops_per_token(inputs.shape) if inputs.shape is not None else None
    return ProgressComparison(
        observed_seconds_per_iter=observed,
        tokens_per_iter=tokens,
        observed_tokens_per_s=tokens_per_s,
        baseline_path=inputs.baseline_path,
        reference_device=baseline.device_name if baseline is not None else None,
        reference_seconds_per_iter=reference,
        reference_grad_accum=micro_steps,
        reference_compiled=baseline.compiled if baseline is not None else None,
        reference_settings=reference_settings(baseline) if baseline is not None else None,
        nothing_to_win=nothing_to_win,
        compute_bound_pct=compute_bound,
        other_cost_pct=other,
        model=inputs.model,
        flops_per_token=per_token,
        achieved_flops_per_s=estimate.achieved_flops_per_s if estimate is not None else
        reported / 100.0 * NANOGPT_PROMISED_FLOPS if rebased_peak is not None and reported is not None else None,
        peak_flops_per_s=peak.flops_per_s if peak is not None else None,
        peak_dtype=peak.dtype if peak is not None else None,
        peak_source=peak.source if peak is not None else None,
        corrected_mfu_pct=corrected,
        mfu_basis="nanoGPT's own count" if rebased_peak is not None else None,
        reported_mfu_pct=reported,
        reported_tflops_per_gpu=printed_tflops,
        lines=tuple(lines),
    )


def _how_the_log_counts(log_format: str | None) -> str:
    """', counting attention over the causal half, gputop the whole matrix': said beside the MFU a log printed
    (the format's printed_mfu_counts); '' for a format that does not say."""
    parser = known_format(log_format)
    counts = parser.printed_mfu_counts if parser is not None else None
    return f", {counts.short()}" if counts is not None else ""


def _share_counted_as_the_log(shape: ModelShape, log_format: str | None) -> float | None:
    """The share of gputop's FLOP per token the log's own count gives for this shape (below 1 where it counts
    the causal half of attention), None where the format does not say how it counts or it counts as gputop."""
    parser = known_format(log_format)
    counts = parser.printed_mfu_counts if parser is not None else None
    if counts is None or not counts.differs:
        return None
    family = family_of(shape)
    return counts.share(family.flops_per_token(shape), family.attention_flops_per_token(shape))


def _why_the_logs_mfu_differs(reported: float, corrected: float, shape: ModelShape, peak: PeakFlops,
                              log_format: str | None = None) -> str:
    """One sentence for a framework's printed MFU that gputop's does not confirm (nanoGPT has its own): how the
    framework counts (its format's printed_mfu_counts and printed_mfu_against), gputop's figure in those terms
    where it counts attention otherwise, and what gputop counted."""
    family = family_of(shape)
    parser = known_format(log_format)
    against = parser.printed_mfu_against if parser is not None else None
    counts = parser.printed_mfu_counts if parser is not None else None
    if counts is None:
        theirs = f"the framework counts its FLOP per token and {against}" if against else \
            "the framework counts its own FLOP per token and peak"
    else:
        theirs = counts.words() + (f", against {against}" if against else "")
        share = _share_counted_as_the_log(shape, log_format)
        if share is not None:
            theirs += f": counted that way gputop's is {corrected * share:.1f}%"
        elif not counts.differs and counts.attention is not None:
            theirs += ", so attention is not why"
    return (f"The log's {reported:g}% and gputop's {corrected:.1f}% differ: {theirs}; "
            f"gputop counts {family.formula} for the {family.name} shape given "
            f"({shape.describe()}) against {_flops(peak.flops_per_s)} {peak.dtype}: "
            "check the shape and tokens per iteration given to gputop too.")


def _printed_tflops_line(printed: float, estimate: MfuEstimate | None, log_format: str | None,
                         shape: ModelShape | None = None) -> str:
    """The achieved TFLOP/s per GPU the log printed (Megatron-LM's; not an MFU) beside gputop's achieved
    FLOP/s, counted the log's way where its count of attention is not gputop's, and why they differ when they
    do: the GPUs the tokens are spread over, else the count."""
    parser = known_format(log_format)
    counts = parser.printed_tflops_counts if parser is not None and parser.printed_tflops_counts else \
        "the framework's own FLOP count over the iteration time and its GPUs"
    said = f"The log's {printed:g} TFLOP/s per GPU is achieved FLOP/s, not an MFU ({counts})"
    if estimate is None:
        return f"{said}; pass --model and --tokens-per-iter for gputop's own figure."
    ours = estimate.achieved_flops_per_s / 1e12
    share = _share_counted_as_the_log(shape, log_format) if shape is not None else None
    whole = counted = ""
    if share is not None:  # compare like with like: gputop's FLOP/s counted the log's way
        counted = " counted that way"
        whole = f"{counted} ({ours:.1f} TFLOP/s over the whole score matrix, gputop's convention)"
        ours *= share
    ratio = ours / printed
    if MFU_AGREEMENT[0] <= ratio <= MFU_AGREEMENT[1]:
        return f"{said}: it agrees with gputop's {ours:.1f} TFLOP/s{whole}."
    gpus = round(ratio)
    if gpus >= 2 and abs(ratio / gpus - 1) <= GPU_MULTIPLE_TOLERANCE:
        return (f"{said}: gputop's {ours:.1f} TFLOP/s{counted} is {ratio:.2g}× as much, about {gpus} GPUs' worth: "
                f"the {estimate.tokens_per_iter:,} tokens per iteration given are the whole job's, the log's figure "
                f"one GPU's (give one GPU's share for a per-GPU MFU).")
    return (f"{said}: gputop's {ours:.1f} TFLOP/s{counted} is {ratio:.2g}× as much; check the shape and the "
            f"{estimate.tokens_per_iter:,} tokens per iteration given to gputop.")
