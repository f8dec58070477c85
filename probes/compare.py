"""Two runs side by side (`gputop compare A B`): their pace, tokens/s, MFU, verdict, GPU and main-thread time
shares, the configuration differences between them, and a short verdict in words of what made the difference.

Headless: `load_run` reads one input into a `RunSummary` (CompareError, one line, for input that is not a run;
the reading of each kind of input is probes/compare_inputs.py's), `compare_runs` puts two side by side,
`render_text` and `to_json` show the result. This module is the one import for all of it (`gputop compare`, its
TUI view).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from probes.compare_inputs import FLOP_SETTINGS, CompareError, RunSummary, load_run, parse_settings
from probes.diagnosis.bottlenecks import facts_named
from probes.diagnosis.phases import phase_label
from probes.reference.baseline import SAME_MODEL_FLOPS, compact_count, reference_iteration

# The reading's names are re-exported: `gputop compare`, its TUI view and the tests import all of it from here.
__all__ = ["CompareError", "Comparison", "RunSummary", "compare_runs", "load_run", "measure_rows", "parse_settings",
           "render_text", "rows", "source", "to_json"]

# The configuration keys a side-by-side always shows when either run has them, in this order; other keys that
# differ follow them.
KEY_SETTINGS = ("batch_size", "gradient_accumulation_steps", "block_size", "n_layer", "n_head", "n_embd",
                "vocab_size", "compile", "dtype")
# Settings that only split an iteration's tokens into micro-batches.
_SPLIT_SETTINGS = ("batch_size", "gradient_accumulation_steps")
# Relative differences smaller than this are noise between two runs of the same job, not a difference.
SAME_WITHIN = 0.05
# In two GPU-bound runs the main thread's time computing (issuing kernels) and waiting for the GPU (blocked in a
# CUDA synchronisation) are both the GPU's time: how it splits between them says how far the host runs ahead of
# the GPU, not what changed the pace. Their sum is compared, under this name.
_GPU_TIME = "computing or waiting for the GPU"


@dataclass(frozen=True)
class Comparison:
    a: RunSummary
    b: RunSummary
    config_differences: tuple[tuple[str, Any, Any], ...]  # (key, A's value, B's value)
    verdict: tuple[str, ...]


def compare_runs(a: RunSummary, b: RunSummary) -> Comparison:
    keys = [key for key in KEY_SETTINGS if key in a.config or key in b.config]
    keys += sorted(key for key in set(a.config) | set(b.config) if key not in keys)
    differences = tuple((key, a.config.get(key), b.config.get(key)) for key in keys
                        if a.config.get(key) != b.config.get(key))
    if (a.kind == "probe") != (b.kind == "probe"):  # a job against its model's reference step on this GPU
        job, probe = (b, a) if a.kind == "probe" else (a, b)
        return Comparison(a, b, differences, tuple(_against_reference(job, probe)))
    return Comparison(a, b, differences, tuple(_verdict(a, b, differences)))


def _against_reference(job: RunSummary, probe: RunSummary) -> list[str]:
    """The job's tokens/s against the probe's: the answer to "is this pace what this GPU does for this model?"."""
    kind = "compiled" if probe.compiled else "eager"
    if job.flops_per_token and probe.flops_per_token and \
            abs(job.flops_per_token / probe.flops_per_token - 1) > SAME_MODEL_FLOPS:
        mfu = (f"; their MFU compares across models: {_percent(job.mfu_pct)} ({job.mfu_from}) against "
               f"{_percent(probe.mfu_pct)}" if job.mfu_pct is not None and probe.mfu_pct is not None else "")
        return [f"{probe.label} probed another model than {job.label} runs ({probe.label}: {probe.shape}, "
                f"{compact_count(probe.flops_per_token)} FLOPs per token; {job.label}: {job.shape or 'its model'}, "
                f"{compact_count(job.flops_per_token)}): its tokens/s is no reference for {job.label}{mfu}"]
    if not job.tokens_per_s:
        return [f"no tokens/s for {job.label}: its tokens per iteration are not known (--tokens-per-iter A,B gives "
                f"them), so it cannot be set against {probe.label}'s reference step"]
    assert probe.tokens_per_s is not None  # a probe's result always has its rate (compare_inputs reads it so)
    reference_rate, at = probe.tokens_per_s, "at the probe's batch"
    if job.tokens_per_iter and job.tokens_per_iter != probe.tokens_per_iter and probe.tokens_per_step \
            and probe.fwd_bwd_seconds and probe.optimizer_seconds is not None:
        # As the live pace predicts it: the probe's own tokens/s pays an optimizer step every batch, a job one an
        # iteration.
        seconds, micro_steps = reference_iteration(job.tokens_per_iter, probe.tokens_per_step,
                                                   probe.fwd_bwd_seconds, probe.optimizer_seconds)
        reference_rate = job.tokens_per_iter / seconds
        at = f"for its {job.tokens_per_iter:,} tokens per iteration, {micro_steps:g} of the probe's micro-steps"
    share = job.tokens_per_s / reference_rate
    measure = f"tokens/s {compact_count(job.tokens_per_s)} against the reference's {compact_count(reference_rate)} {at}"
    if job.gpu_name and job.gpu_name != probe.gpu_name:
        return [f"{job.label} runs at {share:.0%} of {probe.label}'s {kind} reference step ({measure}), but "
                f"{probe.label} ran on {probe.gpu_name} and {job.label} on {job.gpu_name}: the reference does not hold "
                "for this GPU"]
    where = "this GPU's" if job.gpu_name else f"the {probe.gpu_name}'s"
    reference = f"{where} {kind} reference step for its model ({measure})"
    if share > 1 + SAME_WITHIN:
        lines = [f"{job.label} runs {share:.2g}× as fast as {reference}: the probe's step is no bound for it "
                 "(torch.compile, a larger micro-batch or another dtype?)"]
    elif share >= 1 - SAME_WITHIN:
        lines = [f"{job.label} runs at {share:.0%} of {reference}: the reference's own levers have nothing left to "
                 "win; what it does not try (FP8, CUDA graphs, another micro-batch) it does not rule out"]
    else:
        lines = [f"{job.label} runs at {share:.0%} of {reference}: ~{1 - share:.0%} of its time goes to work the "
                 "reference step does not do (input pipeline, host work, communication) or to a slower step than the "
                 "probe's (another micro-batch, dtype, or no torch.compile)"]
    if not job.flops_per_token:
        lines.append(f"{job.label}'s model is not known here: that it is the one {probe.label} probed "
                     f"({probe.model}: {probe.shape}) is assumed")
    if not job.gpu_name:
        lines.append(f"{job.label}'s GPU is not known here: the reference holds if it ran on the probe's GPU "
                     f"({probe.gpu_name})")
    return lines


def _ratio(before: float | None, after: float | None) -> float | None:
    return after / before if before and after else None


def _times(ratio: float) -> str:
    return f"{ratio:.1f}×"


def _verdict(a: RunSummary, b: RunSummary, differences: Sequence[tuple[str, Any, Any]]) -> list[str]:
    """What made the difference, in words: work done per second first (tokens/s, else the pace), then why."""
    lines = _headline(a, b, differences)
    if a.bottleneck and b.bottleneck and a.bottleneck != b.bottleneck:
        if _same_job(a, b):  # B is A's job again: what limits it moved
            lines.append(f"the bottleneck moved: {a.bottleneck} → {b.bottleneck}")
            if (predicted := _predicted_gain(a, b)) is not None:
                lines.append(predicted)
        else:  # two jobs side by side: each has its own limit, nothing moved
            lines.append(f"the bottlenecks differ: {a.label} {a.bottleneck}, {b.label} {b.bottleneck} (not the same "
                         "job: another model or tokens per iteration, or either unknown)")
    both_gpu_bound = _gpu_busy(a) and _gpu_busy(b)
    shares_a, shares_b = _compared_shares(a, both_gpu_bound), _compared_shares(b, both_gpu_bound)
    moved = sorted(set(shares_a) | set(shares_b), key=lambda p: -max(shares_a.get(p, 0.0), shares_b.get(p, 0.0)))
    for phase in moved if a.time_shares and b.time_shares else ():
        before, after = shares_a.get(phase, 0.0), shares_b.get(phase, 0.0)
        if abs(after - before) >= 0.15:  # a phase that took a sixth more or less of the main thread's time
            lines.append(f"the main thread's {phase_label(phase)} share: {before:.0%} → {after:.0%}")
    split = [f"{key} {_said(x)} → {_said(y)}" for key, x, y in differences if key in _SPLIT_SETTINGS]
    if split and a.tokens_per_iter and a.tokens_per_iter == b.tokens_per_iter:
        lines.append(f"both train {a.tokens_per_iter:,} tokens per iteration, split differently: {', '.join(split)}")
        split = []
    other = split + [f"{key} {_said(x)} → {_said(y)}" for key, x, y in differences
                     if key not in FLOP_SETTINGS + _SPLIT_SETTINGS + ("n_head",)]
    if other:
        lines.append("other settings that differ: " + ", ".join(other))
    return lines


def _gpu_busy(run: RunSummary) -> bool:
    """The run's verdict names a busy GPU as its limit (a bottleneck of another gputop's vocabulary does not)."""
    facts = facts_named(run.bottleneck)
    return facts is not None and facts.gpu_busy


def _held_by(bottleneck: str | None) -> tuple[str, ...]:
    """The time shares a bottleneck's fix removes, named both as a snapshot's time_shares name them (data,
    collectives) and as stack activities do, which this module sums itself for a recording whose snapshot carries
    no shares; () where no measured phase bounds its fix."""
    facts = facts_named(bottleneck)
    if facts is None or facts.fix_removes is None:
        return ()
    return tuple(dict.fromkeys((*facts.fix_removes.phases, *facts.fix_removes.activities)))


def _compared_shares(run: RunSummary, both_gpu_bound: bool) -> dict[str, float]:
    """The shares whose moves are worth a line: in two GPU-bound runs, computing and waiting for the GPU as one."""
    if not both_gpu_bound:
        return run.time_shares
    shares = {phase: share for phase, share in run.time_shares.items() if phase not in ("compute", "gpu_wait")}
    gpu_time = run.time_shares.get("compute", 0.0) + run.time_shares.get("gpu_wait", 0.0)
    return {**shares, _GPU_TIME: gpu_time} if gpu_time else shares


def _headline(a: RunSummary, b: RunSummary, differences: Sequence[tuple[str, Any, Any]]) -> list[str]:
    """Which run does more work per second, and by how much, with the MFU and FLOPs per token that explain it."""
    speed = _ratio(a.tokens_per_s, b.tokens_per_s)  # > 1: B does more tokens per second
    if speed is not None:
        measure = f"tokens/s {compact_count(a.tokens_per_s)} → {compact_count(b.tokens_per_s)}"
        per = "per token"
    else:
        pace = _ratio(b.seconds_per_iter, a.seconds_per_iter)  # > 1: B's iterations are quicker
        if pace is None:
            return [f"no pace for {run.label} ({run.source}): its speed cannot be compared"
                    for run in (a, b) if not run.seconds_per_iter]
        speed, per = pace, "per iteration"
        measure = f"s/iter {a.seconds_per_iter:.3g} → {b.seconds_per_iter:.3g}"
        if a.tokens_per_iter != b.tokens_per_iter:
            per += " (tokens per iteration unknown: --tokens-per-iter A,B compares the work)"
    if abs(speed - 1) < SAME_WITHIN:
        headline = f"{b.label} runs at the same speed {per} as {a.label} ({measure})"
    elif speed < 1:
        headline = f"{b.label} is {_times(1 / speed)} slower {per} than {a.label} ({measure})"
    else:
        headline = f"{b.label} is {_times(speed)} faster {per} than {a.label} ({measure})"
    mfu_change = _ratio(a.mfu_pct, b.mfu_pct)
    cost = _ratio(a.flops_per_token, b.flops_per_token)
    mfu_words = (f"its MFU is {'higher' if mfu_change > 1 else 'lower'} ({_percent(a.mfu_pct)} → {_percent(b.mfu_pct)})"
                 if mfu_change is not None and a.mfu_pct is not None and b.mfu_pct is not None
                 and abs(mfu_change - 1) >= SAME_WITHIN else None)
    shape_keys = [f"{key} {_said(x)} → {_said(y)}" for key, x, y in differences if key in FLOP_SETTINGS]
    cost_words = (f"each of its tokens costs {_times(cost)} the FLOPs"
                  + (f" ({', '.join(shape_keys)})" if shape_keys else "")
                  if cost is not None and abs(cost - 1) >= SAME_WITHIN else None)
    # Higher MFU with fewer tokens/s (or lower with more) looks like a contradiction until the FLOPs per token
    # are counted: that is the sentence a reader needs.
    if mfu_words and mfu_change is not None and (mfu_change > 1) != (speed > 1) and abs(speed - 1) >= SAME_WITHIN:
        headline += f" though {mfu_words}"
        return [headline + (f": {cost_words}" if cost_words else "")]
    return [headline + (f"; {mfu_words}" if mfu_words else "") + (f"; {cost_words}" if cost_words else "")]


def _said(value: Any) -> str:
    return "—" if value is None else str(value)


def _percent(value: float) -> str:
    return f"{value:.1f}%" if value >= 1 else f"{value:.2g}%"  # an MFU of 0.01% must not print as 0.0%


def _same_job(a: RunSummary, b: RunSummary) -> bool:
    """Whether B is A's job again (A with a fix): the same model, told by what a token costs (by the shape in words
    where either side has no FLOPs per token), and the same tokens per iteration, each as both runs state it. Only
    then is B's pace what A's fix won; two models side by side set one's predicted gain against another's pace."""
    if not a.tokens_per_iter or a.tokens_per_iter != b.tokens_per_iter:
        return False
    if a.flops_per_token and b.flops_per_token:
        return abs(a.flops_per_token / b.flops_per_token - 1) <= SAME_MODEL_FLOPS
    return a.shape is not None and a.shape == b.shape


def _predicted_gain(a: RunSummary, b: RunSummary) -> str | None:
    """What fixing A's bottleneck could win at most (1 / (1 − the share of A's main thread it held)) beside what
    B, the run after the fix, got per iteration; None when A's bottleneck holds no measured share."""
    held = sum(a.time_shares.get(phase, 0.0) for phase in _held_by(a.bottleneck))
    got = _ratio(b.seconds_per_iter, a.seconds_per_iter)
    if got is None:
        return None
    if a.max_speedup is not None:
        return (f"{a.label}'s verdict ({a.bottleneck}) said its fix could win up to {_times(a.max_speedup)} per "
                f"iteration; {b.label} got {_times(got)}")
    if held < 0.05:
        return None
    if held > 0.995:  # every sample: the samples set no upper bound
        return (f"{a.label}'s {a.bottleneck} held its main thread in every sample, so no limit to what its fix "
                f"could win shows; {b.label} got {_times(got)} per iteration")
    bound = 1 / (1 - held)
    said = (f"{a.label}'s {a.bottleneck} held its main thread {held:.0%} of the time: its fix could win up to "
            f"{_times(bound)} per iteration; {b.label} got {_times(got)}")
    if got > bound * (1 + SAME_WITHIN * 2) and a.seconds_per_iter and b.seconds_per_iter:
        # Only the rest of A's step can remain after the fix; B's whole step is shorter still, so something
        # besides the fix sped up too: the CPU a DataLoader worker took back, another load gone.
        said += (f", more than the bound: the rest of {a.label}'s step took {a.seconds_per_iter * (1 - held):.3g} s, "
                 f"{b.label}'s whole step {b.seconds_per_iter:.3g} s, so more than the fix changed")
    return said


def _cell(value: Any, unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3g}{unit}"
    return f"{value}{unit}"


def rows(comparison: Comparison) -> list[tuple[str, str, str]]:
    """The side-by-side table: (what, A, B), where each run came from first."""
    a, b = comparison.a, comparison.b
    return [("source", source(a), source(b)), *measure_rows(comparison)]


def source(run: RunSummary) -> str:
    """Where a run was read from: "runs/a.jsonl (recording)"."""
    return f"{run.source} ({run.kind})"


def measure_rows(comparison: Comparison) -> list[tuple[str, str, str]]:
    """The measures side by side, (what, A, B): pace, tokens, MFU, model, verdict, GPU, time shares, then the
    settings that differ. A screen that names each run's source in its header shows these alone."""
    a, b = comparison.a, comparison.b
    table = [
        ("s/iter", _cell(a.seconds_per_iter), _cell(b.seconds_per_iter)),
        ("tokens/iter", _tokens(a), _tokens(b)),
        ("tokens/s", compact_count(a.tokens_per_s), compact_count(b.tokens_per_s)),
        ("MFU", _mfu(a), _mfu(b)),
        ("FLOPs/token", compact_count(a.flops_per_token), compact_count(b.flops_per_token)),
        ("model", a.shape or "—", b.shape or "—"),
        *([("model from", _model_from(a), _model_from(b))] if a.shape_from or b.shape_from else []),
        ("bottleneck", a.bottleneck or "—", b.bottleneck or "—"),
        ("liveness", a.liveness or "—", b.liveness or "—"),
    ]
    if a.gpu_name or b.gpu_name:
        table += [("GPU", a.gpu_name or "—", b.gpu_name or "—"),
                  ("SM clock", _whole(a.sm_clock_mhz, " MHz"), _whole(b.sm_clock_mhz, " MHz")),
                  ("power", _whole(a.power_w, " W"), _whole(b.power_w, " W"))]
    for phase in _phases(a, b):
        table.append((f"main thread: {phase_label(phase)}", _share(a, phase), _share(b, phase)))
    table += [(key, _cell(x), _cell(y)) for key, x, y in comparison.config_differences]
    return table


def _tokens(run: RunSummary) -> str:
    return f"{run.tokens_per_iter:,} ({run.tokens_per_iter_from})" if run.tokens_per_iter else "—"


def _model_from(run: RunSummary) -> str:
    """Where the run's shape came from, with what gputop called the model ("nanoGPT: nanoGPT's command line: ...");
    a probe's, compiled or eager."""
    if not run.shape_from:
        return "—"
    said = run.shape_from if not run.model or run.model in run.shape_from else f"{run.model}: {run.shape_from}"
    return said + ({True: ", compiled", False: ", eager"}[run.compiled] if run.compiled is not None else "")


def _phases(a: RunSummary, b: RunSummary) -> list[str]:
    """The activities either run's main thread spent time in, the larger share first."""
    return sorted(set(a.time_shares) | set(b.time_shares),
                  key=lambda phase: -max(a.time_shares.get(phase, 0.0), b.time_shares.get(phase, 0.0)))


def _share(run: RunSummary, phase: str) -> str:
    return f"{run.time_shares.get(phase, 0.0):.0%}" if run.time_shares else "—"  # — : no stacks in this input


def _whole(value: float | None, unit: str) -> str:
    return f"{value:.0f}{unit}" if value is not None else "—"


def _mfu(run: RunSummary) -> str:
    return f"{_percent(run.mfu_pct)} ({run.mfu_from})" if run.mfu_pct is not None else "—"


def render_text(comparison: Comparison) -> str:
    table = [("", comparison.a.label, comparison.b.label), *rows(comparison)]
    widths = [max(len(row[column]) for row in table) for column in range(3)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in table]
    return "\n".join([*lines, "", *comparison.verdict]) + "\n"


def to_json(comparison: Comparison) -> dict[str, Any]:
    return {
        "a": asdict(comparison.a),
        "b": asdict(comparison.b),
        "config_differences": [{"key": key, "a": x, "b": y} for key, x, y in comparison.config_differences],
        "verdict": list(comparison.verdict),
    }
