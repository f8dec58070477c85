"""What a run's pace was measured with, as gputop resolved it, in a document that travels with the run.

Live, gputop resolves what the job's pace is set against from the job itself and the options: the model (its
family and shape from the job's command line, a config.json it names, --model or the baseline; its FLOPs per
token; where each came from), the job's tokens per iteration and their source, the peak asked for (--gpu,
--peak-tflops, --dtype; the GPU itself is named in every frame) and the baseline probe. A recording is what people
attach to a bug report, and where it is replayed none of the job's files are there to be read again, so
`pace_inputs_document` writes what was resolved into the recording's header and the snapshot (key
"pace_inputs"), `recorded_inputs` reads it back, and `replayed_comparison_inputs` makes the ComparisonInputs that
replay and compare fold with: the options given on replay win, and are said.

Read tolerantly, whatever wrote it: keys this version does not know are ignored (a newer gputop may add some); a
part it cannot read (a shape with fields its family does not have here, a family it does not know, a baseline
that is not a probe result) is left out and the pace says why, never a crash. Recordings written before the
document existed carry only "model" and "tokens_per_iter" in their header: a preset's name gives its shape, any
other name cannot, and the pace says what to pass.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from probes.frame import to_jsonable
from probes.models import FAMILIES, PRESETS, ModelShape, family_of
from probes.models.peaks import DTYPES
from probes.models.stated import StatedModel
from probes.reference.baseline import (
    BaselineError,
    ComparisonInputs,
    PeakOptions,
    baseline_from_data,
    load_comparison_inputs,
)
from probes.reference.gpt_probe import ProbeResult

PACE_INPUTS_VERSION = 1
DEFAULT_DTYPE = "bf16"  # --dtype's default: given on replay, it does not override the dtype the run was measured in
AS_RECORDED = ", as recorded"  # beside a source the replay did not read itself
WHAT_TO_PASS = "pass --model PRESET or config.json (the job's shape)"


def pace_inputs_document(inputs: ComparisonInputs | None) -> dict[str, Any] | None:
    """The resolved inputs as a versioned JSON object (None without inputs): recording headers and snapshots."""
    if inputs is None:
        return None
    shape = inputs.shape
    family = family_of(shape) if shape is not None else None
    return {
        "version": PACE_INPUTS_VERSION,
        "model": inputs.model,
        "family": family.name if family is not None else None,
        "shape": to_jsonable(shape) if shape is not None else None,
        "shape_from": _shape_from(inputs),
        "stated_by": inputs.stated_by,  # set only when the job stated its shape itself
        "flops_per_token": family.flops_per_token(shape) if family is not None else None,
        "flops_formula": family.formula_with_values(shape) if family is not None else None,
        "tokens_per_iter": inputs.tokens_per_iter,
        "tokens_from": inputs.tokens_source if inputs.tokens_per_iter else None,
        "peak": {"gpu": inputs.peak.gpu, "tflops": inputs.peak.tflops, "dtype": inputs.peak.dtype},
        "baseline_path": inputs.baseline_path,
        "baseline": to_jsonable(inputs.baseline) if inputs.baseline is not None else None,  # its file stays behind
    }


def _shape_from(inputs: ComparisonInputs) -> str | None:
    if inputs.shape is None:
        return None
    if inputs.stated_by is not None:
        return inputs.stated_by
    if inputs.baseline is not None and inputs.shape == inputs.baseline.shape:
        return f"the baseline's probe of {inputs.baseline.model}"
    return f"--model {inputs.model}"


@dataclass(frozen=True)
class RecordedInputs:
    """What a recording's header (or a snapshot) says the pace was measured with; None where it does not say."""

    model: str | None = None
    shape: ModelShape | None = None
    shape_from: str | None = None  # in the writer's words, with AS_RECORDED where asked
    stated: bool = False  # the job stated its shape (command line, config.json), rather than --model or the probe
    flops_per_token: int | None = None  # as the writer counted them
    tokens_per_iter: int | None = None
    tokens_from: str | None = None
    peak: PeakOptions = field(default_factory=PeakOptions)  # what was asked for live
    baseline: ProbeResult | None = None
    baseline_path: str | None = None
    unread: tuple[str, ...] = ()  # parts that could not be read back, in words
    where: str = "the recording's header"


def recorded_inputs(header: Mapping[str, Any] | None, where: str = "the recording's header",
                    suffix: str = AS_RECORDED) -> RecordedInputs:
    """What a recording's header (or a snapshot, `where` naming it) carries; `suffix` is set after each source
    it names, so the pace says the figure was not read again. Never raises."""
    if not isinstance(header, Mapping):
        return RecordedInputs(where=where)
    document = header.get("pace_inputs")
    if isinstance(document, Mapping):
        return _from_document(document, where, suffix)
    # Written before pace_inputs: the model's name and the job's tokens per iteration, nothing of the shape.
    model = _text(header.get("model"))
    tokens = _count(header.get("tokens_per_iter"))
    shape = PRESETS.get(model) if model is not None else None  # a preset's name is its shape
    return RecordedInputs(model=model, shape=shape, shape_from=f"--model {model} ({where})" if shape else None,
                          tokens_per_iter=tokens, tokens_from=where if tokens else None,
                          baseline_path=_text(header.get("baseline")), where=where)


def _from_document(document: Mapping[str, Any], where: str, suffix: str) -> RecordedInputs:
    unread: list[str] = []
    shape = _shape(document, unread)
    tokens = _count(document.get("tokens_per_iter"))
    baseline = None
    if document.get("baseline") is not None:
        try:
            baseline = baseline_from_data(document["baseline"], f"in {where}")
        except BaselineError as exc:
            unread.append(f"a baseline that cannot be read ({exc})")
    shape_from = _text(document.get("shape_from"))
    tokens_from = _text(document.get("tokens_from"))
    stated_by = _text(document.get("stated_by"))
    return RecordedInputs(
        model=_text(document.get("model")), shape=shape,
        shape_from=f"{shape_from or where}{suffix}" if shape is not None else None,
        stated=stated_by is not None, flops_per_token=_count(document.get("flops_per_token")),
        tokens_per_iter=tokens, tokens_from=f"{tokens_from}{suffix}" if tokens_from else where if tokens else None,
        peak=_peak(document.get("peak")), baseline=baseline, baseline_path=_text(document.get("baseline_path")),
        unread=tuple(unread), where=where)


def _shape(document: Mapping[str, Any], unread: list[str]) -> ModelShape | None:
    """The recorded shape, or None (and why in `unread`): a field this version's family lacks could change what a
    token costs, so such a shape is not counted with the fields it does know."""
    fields = document.get("shape")
    if not isinstance(fields, Mapping):
        return None
    name = document.get("family")
    family = next((f for f in FAMILIES if f.name == name), None)
    if family is None:
        unread.append(f"a model of the family {name!r}, which this gputop does not know")
        return None
    known = {field.name for field in dataclasses.fields(family.shape_type)}
    extra = sorted(str(key) for key in fields if key not in known)
    if extra:
        unread.append(f"a {family.name} shape with fields this gputop cannot count ({', '.join(extra)})")
        return None
    try:
        shape = family.shape_type(**fields)
        problem = shape.problem()
    except (TypeError, ValueError, ArithmeticError) as exc:
        unread.append(f"a {family.name} shape that cannot be built ({exc})")
        return None
    if problem is not None:
        unread.append(f"an impossible {family.name} shape ({problem})")
        return None
    return shape


def _peak(peak: Any) -> PeakOptions:
    if not isinstance(peak, Mapping):
        return PeakOptions()
    dtype = peak.get("dtype")
    return PeakOptions(gpu=_text(peak.get("gpu")), tflops=_positive_number(peak.get("tflops")),
                       dtype=dtype if dtype in DTYPES else None)


def _positive_number(value: Any) -> float | None:
    """A finite number above zero (a bool is none), as a float; else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def replayed_comparison_inputs(recorded: RecordedInputs, baseline_path: str | None, model: str | None,
                               tokens_per_iter: int | None,
                               peak: PeakOptions | None = None) -> ComparisonInputs | None:
    """The inputs a replay folds with: what the recording carries, under the options given on replay (they win,
    and a figure they replace is said). BaselineError as load_comparison_inputs for a bad --baseline or --model."""
    asked = peak or PeakOptions()
    dtype = asked.dtype if asked.dtype not in (None, DEFAULT_DTYPE) else recorded.peak.dtype or asked.dtype
    merged_peak = PeakOptions(gpu=asked.gpu or recorded.peak.gpu, tflops=asked.tflops or recorded.peak.tflops,
                              dtype=dtype)
    # The shape travels as the job's own unless it was the baseline's, which the recorded baseline carries itself.
    of_the_baseline = (recorded.baseline is not None and not recorded.stated
                       and recorded.shape == recorded.baseline.shape)
    stated = None
    if recorded.shape is not None and not of_the_baseline:
        stated = StatedModel(recorded.shape, recorded.model or "the recorded model", recorded.shape_from or
                             recorded.where, recorded.tokens_per_iter, recorded.tokens_from)
    kept_baseline = recorded.baseline if baseline_path is None else None
    inputs = load_comparison_inputs(baseline_path, model, tokens_per_iter, merged_peak, stated=stated,
                                    baseline=kept_baseline)
    notes: list[str] = []
    if baseline_path is not None and recorded.baseline_path and recorded.baseline_path != baseline_path:
        notes.append(f"--baseline {baseline_path} is used, not the baseline the recording was compared with "
                     f"({recorded.baseline_path}).")
    elif baseline_path is None and recorded.baseline is None and recorded.baseline_path:
        notes.append(f"The recording was compared with the baseline {recorded.baseline_path}, which its header does "
                     f"not carry: pass --baseline {recorded.baseline_path} for the reference step.")
    if inputs is not None:
        if kept_baseline is not None and inputs.baseline is kept_baseline:
            inputs = dataclasses.replace(inputs, baseline_path=recorded.baseline_path)
        if stated is None and recorded.tokens_per_iter:  # the job's tokens travelled without a shape of its own
            if tokens_per_iter is None:
                inputs = dataclasses.replace(inputs, tokens_per_iter=recorded.tokens_per_iter,
                                             tokens_source=recorded.tokens_from or recorded.where)
            elif tokens_per_iter != recorded.tokens_per_iter:
                notes.append(f"--tokens-per-iter {tokens_per_iter:,} is used, not the {recorded.tokens_per_iter:,} "
                             f"of {recorded.tokens_from or recorded.where}.")
        notes += [f"Not read from {recorded.where}: {what}." for what in recorded.unread]
        return dataclasses.replace(inputs, notes=(*inputs.notes, *notes)) if notes else inputs
    if recorded.model is None and recorded.tokens_per_iter is None and not recorded.unread:
        return None  # nothing recorded, nothing asked: no pace comparison, as before
    tokens = tokens_per_iter or recorded.tokens_per_iter
    return ComparisonInputs(model=recorded.model, tokens_per_iter=tokens, peak=merged_peak,
                            tokens_source="--tokens-per-iter" if tokens_per_iter else
                            recorded.tokens_from or recorded.where, notes=tuple(notes),
                            no_mfu_why=_no_mfu_why(recorded))


def _no_mfu_why(recorded: RecordedInputs) -> str:
    """Why gputop cannot count the FLOPs from what was recorded, and what to pass (the pace says it after "No MFU:",
    or beside an MFU the job's log counted itself)."""
    if recorded.unread:
        return f"{recorded.where} carries {'; '.join(recorded.unread)}: {WHAT_TO_PASS}"
    if recorded.model is not None:
        return (f"the recording names the model {recorded.model} but not its shape (an older gputop wrote it): "
                f"{WHAT_TO_PASS}")
    return f"the recording does not name the model: {WHAT_TO_PASS}, or --baseline"
