"""Two runs side by side (`gputop compare A B`): what each run's snapshot, recording or training log says about
its pace, tokens/s, MFU, verdict, GPU and main-thread time shares, the configuration differences between them,
and a short verdict in words of what made the difference.

Headless: `load_run` reads one input into a `RunSummary` (CompareError, one line, for input that is not a run),
`compare_runs` puts two side by side, `render_text` and `to_json` show the result. A recording is folded through
`probes.monitoring.monitor.fold`'s Monitor exactly as `gputop replay --snapshot` does; a log is read line by line with
the log
formats of probes/logformats. FLOPs per token come from the GPT-2 family (probes/models/gpt2.py) when a run's
configuration names its shape.
"""

from __future__ import annotations

import json
import re
import shlex
from ast import literal_eval
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from probes.diagnosis.evidence import GPU_WAIT_UTIL_PCT
from probes.diagnosis.shares import phase_label
from probes.diagnosis.stacks import (
    CHECKPOINT,
    COMMS,
    COMPILE,
    DATA_PREP,
    DATA_WAIT,
    IO,
    ThreadProfile,
    is_main_thread,
)
from probes.logformats import LogReader, known_format
from probes.models.gpt2 import FAMILY as GPT2
from probes.models.gpt2 import GptShape
from probes.models.nanogpt_config import configurator_overrides
from probes.outputs.snapshot import SNAPSHOT_SCHEMA
from probes.reference.baseline import BaselineError, baseline_from_data
from probes.reference.gpt_probe import PROBE_SCHEMA

# nanoGPT's vocabulary (GPT-2's 50257 padded to a multiple of 64), assumed when a run's configuration gives none.
DEFAULT_VOCAB_SIZE = 50304
# The configuration keys a side-by-side always shows when either run has them, in this order; other keys that
# differ follow them.
KEY_SETTINGS = ("batch_size", "gradient_accumulation_steps", "block_size", "n_layer", "n_head", "n_embd",
                "vocab_size", "compile", "dtype")
# Settings that change the FLOPs of a token (the head count does not: 12·L·H·Q·T = 12·L·n_embd·T), and those that
# only split an iteration's tokens into micro-batches.
_FLOP_SETTINGS = ("n_layer", "n_embd", "block_size", "vocab_size")
_SPLIT_SETTINGS = ("batch_size", "gradient_accumulation_steps")
# The main-thread phases each bottleneck's fix removes: their share bounds what the fix can win (Amdahl). Named
# both as a snapshot's time_shares name them (data, collectives) and as stacks.py's activities do, which this
# module sums itself for a recording whose snapshot carries no shares.
_HELD_BY = {"data_bound": ("data", DATA_WAIT, DATA_PREP), "io_bound": ("data", IO),
            "checkpoint_save": (CHECKPOINT,), "compile_warmup": (COMPILE,), "comms_bound": ("collectives", COMMS)}
# Relative differences smaller than this are noise between two runs of the same job, not a difference.
SAME_WITHIN = 0.05
# A probe's FLOPs per token within this of a job's: the same model (vocabularies differ by padding or by gputop's
# estimate from a printed parameter count), so its step is the job's reference.
SAME_MODEL_FLOPS = 0.02
# In two GPU-bound runs the main thread's time computing (issuing kernels) and waiting for the GPU (blocked in a
# CUDA synchronisation) are both the GPU's time: how it splits between them says how far the host runs ahead of
# the GPU, not what changed the pace. Their sum is compared, under this name.
_GPU_BOUND = ("gpu_bound", "gpu_throttled")
_GPU_TIME = "computing or waiting for the GPU"

# nanoGPT echoes its config file ("key = value  # comment") and each --key=value override
# ("Overriding: key = value") into its log through configurator.py.
_CONFIG_LINE = re.compile(r"^(?:Overriding: )?([a-z_][a-z0-9_]*) = (.+?)(?:\s+#.*)?$")
_TOKENS_PER_ITER_LINE = re.compile(r"tokens per iteration will be: ([\d,]+)")


class CompareError(Exception):
    """An input that is not a run gputop can compare; the message is one line for the user."""


@dataclass(frozen=True)
class RunSummary:
    """What one run's input says, None where it does not say."""

    label: str
    source: str
    kind: str  # snapshot, recording or log
    seconds_per_iter: float | None = None
    tokens_per_iter: int | None = None
    tokens_per_iter_from: str | None = None  # the flag, the log's own line, the configuration's product
    tokens_per_s: float | None = None
    mfu_pct: float | None = None
    mfu_from: str | None = None  # gputop's (observed FLOP/s over the GPU's peak) or as the job printed it
    flops_per_token: int | None = None
    shape: str | None = None  # the shape the FLOPs per token were counted for, in words
    model: str | None = None  # what gputop called the model: "nanoGPT", a preset, a config.json's path
    shape_from: str | None = None  # where the shape came from: the job's command line, --model, the probe's
    compiled: bool | None = None  # a probe's step: under torch.compile or eager (None for a job)
    # A probe's micro-step (forward+backward of its batch's tokens) and optimizer step, to predict the reference's
    # time for a job's own tokens per iteration: the probe pays one optimizer step per batch, a job per iteration.
    fwd_bwd_seconds: float | None = None
    optimizer_seconds: float | None = None
    tokens_per_step: int | None = None
    bottleneck: str | None = None
    liveness: str | None = None
    gpu_name: str | None = None
    sm_clock_mhz: float | None = None
    power_w: float | None = None
    time_shares: dict[str, float] = field(default_factory=dict)  # main thread's phase -> share of its time
    max_speedup: float | None = None  # the snapshot's own bound on what its verdict's fix can win
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Comparison:
    a: RunSummary
    b: RunSummary
    config_differences: tuple[tuple[str, Any, Any], ...]  # (key, A's value, B's value)
    verdict: tuple[str, ...]


def load_run(path: str, label: str, *, tokens_per_iter: int | None = None,
             config: Mapping[str, Any] | None = None) -> RunSummary:
    """One run from a snapshot (.json), a recording (.jsonl) or a training log (anything else).

    `tokens_per_iter` and `config` are what the user stated on the command line; they win over what the input
    says. CompareError for a missing file, a JSON that is not a gputop snapshot, or a log with no step lines."""
    file = Path(path)
    if not file.exists():
        raise CompareError(f"{path}: no such file")
    if not file.is_file():
        raise CompareError(f"{path}: not a file (a snapshot .json, a recording .jsonl or a training log)")
    stated = dict(config or {})
    try:
        if file.suffix == ".jsonl":
            document, shares = _fold_recording(path)
            return _summary_from_snapshot(document, path, label, "recording", shares, tokens_per_iter, stated)
        if file.suffix == ".json":
            document = _read_snapshot(path)
            if document.get("schema") == PROBE_SCHEMA:
                return _summary_from_probe(document, path, label, stated)
            return _summary_from_snapshot(document, path, label, "snapshot", None, tokens_per_iter, stated)
        return _summary_from_log(path, label, tokens_per_iter, stated)
    except OSError as exc:
        raise CompareError(f"{path}: {exc.strerror or exc}") from None


def _read_snapshot(path: str) -> dict[str, Any]:
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CompareError(f"{path}: not JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("schema") not in (SNAPSHOT_SCHEMA, PROBE_SCHEMA):
        raise CompareError(f"{path}: not a gputop snapshot or probe result (no \"schema\": "
                           f"\"{SNAPSHOT_SCHEMA}\" or \"{PROBE_SCHEMA}\")")
    return document


def _fold_recording(path: str) -> tuple[dict[str, Any], dict[str, float]]:
    """The recording's snapshot, folded as `gputop replay --snapshot` folds it, and its main thread's activity
    shares over every frame, for a snapshot that carries no time_shares of its own."""
    from probes.monitoring.monitor import Monitor
    from probes.outputs.recording import RecordingError, read_header, read_recording
    from probes.reference.pace_inputs import recorded_inputs, replayed_comparison_inputs

    # The model, tokens per iteration and peak the live run resolved, from the header, as replay reads them.
    monitor = Monitor(replay=True, comparison=replayed_comparison_inputs(recorded_inputs(read_header(path)),
                                                                         None, None, None))
    main_thread = ThreadProfile()
    whole = 0
    try:
        for frame in read_recording(path, []):
            monitor.ingest(frame)
            for count in frame.stacks.counts:
                if is_main_thread(count.pid, count.tid, count.thread_name, count.frames, frame.target.pid):
                    main_thread.add(count)
            whole += 1
    except RecordingError as exc:
        raise CompareError(str(exc)) from None
    if not whole:
        raise CompareError(f"{path}: holds no frames")
    shares = {activity: samples / main_thread.samples for activity, samples in main_thread.by_activity.items()}
    return monitor.snapshot(), shares


def _summary_from_snapshot(document: dict[str, Any], path: str, label: str, kind: str,
                           shares: dict[str, float] | None, tokens_per_iter: int | None,
                           stated: dict[str, Any]) -> RunSummary:
    progress = document.get("progress") or {}
    baseline = progress.get("baseline") or {}
    verdict = document.get("verdict") or {}
    resolved = _resolved_model(document)
    # The shape's own settings where the command line does not give them (a config file's, read live); never the
    # vocabulary, which nanoGPT takes from the dataset and gputop only estimated: the FLOPs per token carry it.
    config = {**resolved.settings, **_cmdline_config((document.get("target") or {}).get("cmdline")), **stated}
    seconds_per_iter = _positive(progress.get("seconds_per_iter"))
    tokens, tokens_from = _tokens_per_iter(tokens_per_iter, resolved.tokens_per_iter, resolved.tokens_from, config)
    gpu_name, clock, power = _gpu(document.get("gpus") or {})
    if resolved.tokens_assumed:  # an older gputop's MFU from the probe's tokens per iteration: not the job's
        baseline = {**baseline, "corrected_mfu_pct": None}
    if baseline.get("corrected_mfu_pct") is not None:
        basis = baseline.get("mfu_basis")  # nanoGPT's printed mfu re-based to the GPU's peak, where no shape was known
        mfu, mfu_from = baseline["corrected_mfu_pct"], f"gputop's, by {basis}" if basis else "gputop's"
    elif progress.get("reported_mfu_pct") is not None:
        mfu, mfu_from = progress["reported_mfu_pct"], printed_mfu_words(progress.get("format"))
    else:
        mfu, mfu_from = None, None
    shares = _stated_shares(document.get("time_shares")) or shares or {}
    if "time_shares_gpu_wait_util_pct" not in document:
        shares = _gpu_waits_said_idle(shares, document.get("gpus") or {})
    return _finish(RunSummary(
        label=label, source=path, kind=kind, seconds_per_iter=seconds_per_iter, tokens_per_iter=tokens,
        tokens_per_iter_from=tokens_from, tokens_per_s=_positive(progress.get("tokens_per_s")), mfu_pct=mfu,
        mfu_from=mfu_from, bottleneck=verdict.get("bottleneck"), liveness=verdict.get("liveness"),
        gpu_name=gpu_name, sm_clock_mhz=clock, power_w=power, time_shares=shares,
        max_speedup=_positive(verdict.get("max_speedup")), config=config,
        # the FLOPs per token gputop counted live, unless --config-a/-b changed the shape: then counted again
        flops_per_token=None if any(key in stated for key in _FLOP_SETTINGS) else resolved.flops_per_token,
        shape=resolved.shape, model=resolved.model, shape_from=resolved.shape_from))


def _summary_from_probe(data: dict[str, Any], path: str, label: str, stated: dict[str, Any]) -> RunSummary:
    """A `gputop probe --json` result as a run: the model's reference step on this GPU (synthetic data already on
    the device), its tokens per iteration those of the probe's batch."""
    try:
        probe = baseline_from_data(data, path)
    except BaselineError as exc:
        raise CompareError(str(exc)) from None
    shape = probe.shape
    config = {key: getattr(shape, key) for key in ("n_layer", "n_head", "n_embd", "block_size") if hasattr(shape, key)}
    config |= {"batch_size": probe.batch_size, "gradient_accumulation_steps": probe.grad_accum, **stated}
    return _finish(RunSummary(
        label=label, source=path, kind="probe", seconds_per_iter=probe.iter_seconds,
        tokens_per_iter=probe.tokens_per_iter, tokens_per_iter_from="the probe's batch",
        tokens_per_s=probe.tokens_per_iter / probe.iter_seconds,
        mfu_pct=probe.mfu * 100 if probe.mfu is not None else None, mfu_from="gputop probe's",
        flops_per_token=probe.flops_per_token, shape=shape.describe(), model=probe.model,
        shape_from=f"gputop probe --model {probe.model}", compiled=probe.compiled, gpu_name=probe.device_name,
        config=config, fwd_bwd_seconds=probe.fwd_bwd_seconds, optimizer_seconds=probe.optimizer_seconds,
        tokens_per_step=probe.tokens_per_step))


@dataclass(frozen=True)
class _Resolved:
    """The model and tokens per iteration gputop resolved for a snapshot's job, with their sources."""

    model: str | None = None
    shape: str | None = None  # in words
    shape_from: str | None = None
    flops_per_token: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # the shape's n_layer, n_head, n_embd, block_size
    tokens_per_iter: int | None = None
    tokens_from: str | None = None
    tokens_assumed: bool = False  # an older gputop took the probe's for the job's


# What an older snapshot's pace lines said of its tokens and model (probes/reference/baseline.py compare_progress),
# before
# the snapshot carried them as data (pace_inputs).
_TOKENS_LINE = re.compile(r"^[\d,]+ tokens/s \(([\d,]+) tokens per iteration, (.+)\)\.$")
_MODEL_LINE = re.compile(r"^Model from (.+): ([^:]+)\.$")
_GPT_WORDS = re.compile(r"^(\d+) layers, (\d+) heads, (\d+) embd, block (\d+)")


def _resolved_model(document: Mapping[str, Any]) -> _Resolved:
    """What the snapshot says gputop resolved: its pace_inputs, else (a snapshot written before them) what its
    pace's own lines and figures say: the FLOPs per token, the model's name, the "Model from ..." line with the
    shape in words, and the tokens per iteration with their source. A label is only ever the source gputop named."""
    from probes.reference.pace_inputs import recorded_inputs

    recorded = recorded_inputs(document, where="the snapshot", suffix="")
    if recorded.shape is not None or recorded.tokens_per_iter:
        shape = recorded.shape
        settings = {key: getattr(shape, key) for key in ("n_layer", "n_head", "n_embd", "block_size")
                    if hasattr(shape, key)} if shape is not None else {}
        return _Resolved(model=recorded.model, shape=shape.describe() if shape is not None else None,
                         shape_from=recorded.shape_from, flops_per_token=recorded.flops_per_token, settings=settings,
                         tokens_per_iter=recorded.tokens_per_iter, tokens_from=_given_to_gputop(recorded.tokens_from))
    pace = (document.get("progress") or {}).get("baseline") or {}
    lines = [line for line in pace.get("lines") or () if isinstance(line, str)]
    tokens, tokens_from = _positive(pace.get("tokens_per_iter")), None
    assumed = pace.get("tokens_per_iter_assumed") is True
    for line in lines:
        if (said := _TOKENS_LINE.match(line)) is not None:
            tokens_from = said.group(2)
    shape = shape_from = None
    settings: dict[str, Any] = {}
    for line in lines:
        if (said := _MODEL_LINE.match(line)) is not None:
            shape_from, shape = said.group(1), said.group(2)
            if (gpt := _GPT_WORDS.match(shape)) is not None:
                settings = dict(zip(("n_layer", "n_head", "n_embd", "block_size"), map(int, gpt.groups()), strict=True))
    return _Resolved(model=pace.get("model"), shape=shape, shape_from=shape_from,
                     flops_per_token=_positive(pace.get("flops_per_token")), settings=settings,
                     tokens_per_iter=None if assumed else tokens,
                     tokens_from=_given_to_gputop(tokens_from) or "gputop's pace (its source not recorded)",
                     tokens_assumed=assumed)


def _given_to_gputop(source: str | None) -> str | None:
    """A snapshot's "--tokens-per-iter" was the flag given to the gputop that wrote it, not to compare."""
    return "gputop's --tokens-per-iter" if source == "--tokens-per-iter" else source


def printed_mfu_words(log_format: str | None) -> str:
    """Where an MFU the job printed comes from, with the peak its framework divides by where that is fixed
    whatever the GPU (nanoGPT: an A100's), so a figure above 100% never stands without its cause, and how it
    counts attention where that is not gputop's way (llm.c: the causal half)."""
    parser = known_format(log_format)
    against = parser.printed_mfu_against if parser is not None else None
    counts = parser.printed_mfu_counts if parser is not None else None
    words = f"as the job printed it, against {against}" if against else "as the job printed it"
    return f"{words}, {counts.short()}" if counts is not None and counts.differs else words


def _summary_from_log(path: str, label: str, tokens_per_iter: int | None, stated: dict[str, Any]) -> RunSummary:
    reader = LogReader()
    config: dict[str, Any] = {}
    printed_tokens: int | None = None
    step_times: list[float] = []
    last_mfu: float | None = None
    mfu_format: str | None = None
    try:
        with open(path, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                text = line.strip()
                if (setting := _CONFIG_LINE.match(text)) is not None:
                    config[setting.group(1)] = _value(setting.group(2))
                elif (tokens := _TOKENS_PER_ITER_LINE.search(text)) is not None:
                    printed_tokens = int(tokens.group(1).replace(",", ""))
                elif (progress := reader.read(text)) is not None:
                    if progress.seconds_per_iter is not None:
                        step_times.append(progress.seconds_per_iter)
                    if progress.reported_mfu_pct is not None:  # Composer prints it on a line of its own
                        last_mfu, mfu_format = progress.reported_mfu_pct, progress.format
    except OSError as exc:
        raise CompareError(f"{path}: {exc.strerror or exc}") from None
    if not step_times:
        raise CompareError(f"{path}: no step lines with a time per step in this log (is it a training log?)")
    config.update(stated)
    tokens, tokens_from = _tokens_per_iter(tokens_per_iter, printed_tokens, "the log's tokens per iteration", config)
    # the first steps include start-up (nanoGPT's first iteration compiles): the later half is the pace
    settled = sorted(step_times[len(step_times) // 2:])
    return _finish(RunSummary(
        label=label, source=path, kind="log", seconds_per_iter=settled[len(settled) // 2], tokens_per_iter=tokens,
        tokens_per_iter_from=tokens_from, mfu_pct=last_mfu,
        mfu_from=printed_mfu_words(mfu_format) if last_mfu is not None else None, config=config))


def _finish(run: RunSummary) -> RunSummary:
    """Fill what follows from what was read: tokens/s from the pace, FLOPs per token from the shape."""
    tokens_per_s = run.tokens_per_s
    if tokens_per_s is None and run.tokens_per_iter and run.seconds_per_iter:
        tokens_per_s = run.tokens_per_iter / run.seconds_per_iter
    if run.flops_per_token is not None:  # counted by gputop live (or by the probe) for the shape it resolved
        return RunSummary(**{**asdict(run), "tokens_per_s": tokens_per_s})
    shape = _shape(run.config)  # from the settings the table shows: they say where it came from
    return RunSummary(**{**asdict(run), "tokens_per_s": tokens_per_s, "shape_from": None,
                         "flops_per_token": GPT2.flops_per_token(shape) if shape is not None else None,
                         "shape": shape.describe() if shape is not None else None})


def _tokens_per_iter(flag: int | None, read: int | None, read_from: str,
                     config: Mapping[str, Any]) -> tuple[int | None, str | None]:
    if flag:
        return flag, "--tokens-per-iter"
    if read:
        return read, read_from
    factors = [config.get(key) for key in ("batch_size", "block_size", "gradient_accumulation_steps")]
    if all(isinstance(factor, int) and factor > 0 for factor in factors):
        batch, block, accumulation = factors
        return batch * block * accumulation, "batch_size × block_size × gradient_accumulation_steps"
    return None, None


def _shape(config: Mapping[str, Any]) -> GptShape | None:
    """The GPT shape the configuration names, or None when it lacks layers, width or block size. The head count
    changes neither the parameters nor the attention FLOPs (12·L·H·Q·T = 12·L·n_embd·T): one head stands in."""
    values = {key: config.get(key) for key in ("n_layer", "n_embd", "block_size")}
    if not all(isinstance(value, int) and value > 0 for value in values.values()):
        return None
    n_head = config.get("n_head")
    vocab = config.get("vocab_size")
    shape = GptShape(n_head=n_head if isinstance(n_head, int) and n_head > 0 else 1,
                     vocab_size=vocab if isinstance(vocab, int) and vocab > 0 else DEFAULT_VOCAB_SIZE,
                     bias=config.get("bias") is True, **values)
    return shape if shape.problem() is None else None


def _cmdline_config(cmdline: Any) -> dict[str, Any]:
    """nanoGPT's --key=value overrides (configurator.py's convention) on the run's command line."""
    if isinstance(cmdline, str):
        try:
            cmdline = shlex.split(cmdline)
        except ValueError:
            return {}
    if not isinstance(cmdline, list):
        return {}
    return configurator_overrides([argument for argument in cmdline if isinstance(argument, str)])


def parse_settings(settings: Iterable[str]) -> dict[str, Any]:
    """`KEY=VALUE` strings (numbers and booleans as Python writes them) as a dict; CompareError for one without '='."""
    parsed = {}
    for setting in settings:
        key, equals, value = setting.partition("=")
        if not equals or not key.strip():
            raise CompareError(f"expected KEY=VALUE, got {setting!r}")
        parsed[key.strip()] = _value(value.strip())
    return parsed


def _value(text: str) -> Any:
    try:
        return literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text.strip("'\"")


def _positive(value: Any) -> Any:
    return value if isinstance(value, (int, float)) and value > 0 else None


def _gpu(gpus: Mapping[str, Any]) -> tuple[str | None, float | None, float | None]:
    """(name, mean SM clock, total power) of the GPUs the target uses, else of all of them."""
    devices = [d for d in gpus.get("devices") or () if isinstance(d, dict)]
    devices = [d for d in devices if d.get("in_target")] or devices
    if not devices:
        return None, None, None
    clocks = [d["sm_clock_mhz"] for d in devices if isinstance(d.get("sm_clock_mhz"), (int, float))]
    powers = [d["power_w"] for d in devices if isinstance(d.get("power_w"), (int, float))]
    return (devices[0].get("name"), sum(clocks) / len(clocks) if clocks else None,
            sum(powers) if powers else None)


def _stated_shares(shares: Any) -> dict[str, float]:
    """A snapshot's own time shares (phase -> fraction of wall time), where the snapshot carries them."""
    if not isinstance(shares, Mapping):
        return {}
    return {str(phase): float(share) for phase, share in shares.items() if isinstance(share, (int, float))}


def _gpu_waits_said_idle(shares: dict[str, float], gpus: Mapping[str, Any]) -> dict[str, float]:
    """A snapshot written before waiting for the GPU was a phase of its own counted those samples idle (py-spy
    calls a thread blocked in a CUDA synchronisation idle). Where its target's GPUs were busy (util at least
    GPU_WAIT_UTIL_PCT in its GPU reading, the last one it holds), its idle share is such waiting: relabelled
    gpu_wait, as this version measures it."""
    devices = [d for d in gpus.get("devices") or () if isinstance(d, dict)]
    devices = [d for d in devices if d.get("in_target")] or devices
    utils = [d["util_gpu_pct"] for d in devices if isinstance(d.get("util_gpu_pct"), (int, float))]
    if "idle" not in shares or "gpu_wait" in shares or not utils or sum(utils) / len(utils) < GPU_WAIT_UTIL_PCT:
        return shares
    relabelled = {phase: share for phase, share in shares.items() if phase != "idle"}
    relabelled["gpu_wait"] = shares["idle"]
    return relabelled


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
                f"{_count(probe.flops_per_token)} FLOPs per token; {job.label}: {job.shape or 'its model'}, "
                f"{_count(job.flops_per_token)}): its tokens/s is no reference for {job.label}{mfu}"]
    if not job.tokens_per_s:
        return [f"no tokens/s for {job.label}: its tokens per iteration are not known (--tokens-per-iter A,B gives "
                f"them), so it cannot be set against {probe.label}'s reference step"]
    reference_rate, at = probe.tokens_per_s, "at the probe's batch"
    if job.tokens_per_iter and job.tokens_per_iter != probe.tokens_per_iter and probe.tokens_per_step \
            and probe.fwd_bwd_seconds and probe.optimizer_seconds is not None:
        # As the live pace predicts it (probes/reference/baseline.py): the job's micro-steps of the probe's batch and
        # one
        # optimizer step; the probe's own tokens/s pays that step every batch and would flatter the job.
        micro_steps = job.tokens_per_iter / probe.tokens_per_step
        reference_rate = job.tokens_per_iter / (micro_steps * probe.fwd_bwd_seconds + probe.optimizer_seconds)
        at = f"for its {job.tokens_per_iter:,} tokens per iteration, {micro_steps:g} of the probe's micro-steps"
    share = job.tokens_per_s / reference_rate
    measure = f"tokens/s {_count(job.tokens_per_s)} against the reference's {_count(reference_rate)} {at}"
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
        lines = [f"{job.label} runs at {share:.0%} of {reference}: nothing in the step to win"]
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
        lines.append(f"the bottleneck moved: {a.bottleneck} → {b.bottleneck}")
        if (predicted := _predicted_gain(a, b)) is not None:
            lines.append(predicted)
    both_gpu_bound = a.bottleneck in _GPU_BOUND and b.bottleneck in _GPU_BOUND
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
                     if key not in _FLOP_SETTINGS + _SPLIT_SETTINGS + ("n_head",)]
    if other:
        lines.append("other settings that differ: " + ", ".join(other))
    return lines


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
        measure = f"tokens/s {_count(a.tokens_per_s)} → {_count(b.tokens_per_s)}"
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
                 if mfu_change is not None and abs(mfu_change - 1) >= SAME_WITHIN else None)
    shape_keys = [f"{key} {_said(x)} → {_said(y)}" for key, x, y in differences if key in _FLOP_SETTINGS]
    cost_words = (f"each of its tokens costs {_times(cost)} the FLOPs"
                  + (f" ({', '.join(shape_keys)})" if shape_keys else "")
                  if cost is not None and abs(cost - 1) >= SAME_WITHIN else None)
    # Higher MFU with fewer tokens/s (or lower with more) looks like a contradiction until the FLOPs per token
    # are counted: that is the sentence a reader needs.
    if mfu_words and (mfu_change > 1) != (speed > 1) and abs(speed - 1) >= SAME_WITHIN:
        headline += f" though {mfu_words}"
        return [headline + (f": {cost_words}" if cost_words else "")]
    return [headline + (f"; {mfu_words}" if mfu_words else "") + (f"; {cost_words}" if cost_words else "")]


def _said(value: Any) -> str:
    return "—" if value is None else str(value)


def _percent(value: float) -> str:
    return f"{value:.1f}%" if value >= 1 else f"{value:.2g}%"  # an MFU of 0.01% must not print as 0.0%


def _predicted_gain(a: RunSummary, b: RunSummary) -> str | None:
    """What fixing A's bottleneck could win at most (1 / (1 − the share of A's main thread it held)) beside what
    B, the run after the fix, got per iteration; None when A's bottleneck holds no measured share."""
    held = sum(a.time_shares.get(activity, 0.0) for activity in _HELD_BY.get(a.bottleneck or "", ()))
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


def _count(value: float | None) -> str:
    if value is None:
        return "—"
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


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
        ("tokens/s", _count(a.tokens_per_s), _count(b.tokens_per_s)),
        ("MFU", _mfu(a), _mfu(b)),
        ("FLOPs/token", _count(a.flops_per_token), _count(b.flops_per_token)),
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
