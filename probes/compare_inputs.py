"""What one run's input says, for `gputop compare`: `load_run` reads a snapshot (.json), a `gputop probe --json`
result, a recording (.jsonl) or a training log into a `RunSummary`, and CompareError (one line) is its answer to
input that is not a run. `parse_settings` reads the settings stated on the command line, which win over the input's.

A recording is folded through probes.monitoring.monitor's Monitor exactly as `gputop replay --snapshot` does; a log
is read line by line with the log formats of probes/logformats. FLOPs per token come from the GPT-2 family
(probes/models/gpt2.py) when a run's configuration names its shape. Putting two runs side by side is
probes/compare.py's.
"""

from __future__ import annotations

import json
import re
import shlex
from ast import literal_eval
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from probes.diagnosis.gpu_summary import GPU_WAIT_UTIL_PCT
from probes.diagnosis.stacks import ThreadProfile
from probes.logformats import LogReader, known_format
from probes.models.gpt2 import FAMILY as GPT2
from probes.models.gpt2 import GptShape
from probes.models.nanogpt_config import DEFAULT_VOCAB, configurator_overrides
from probes.outputs.snapshot import READ_SNAPSHOT_SCHEMAS, SNAPSHOT_SCHEMA
from probes.reference.baseline import BaselineError, baseline_from_data
from probes.reference.gpt_probe import PROBE_SCHEMA
from probes.stack_identity import is_main_thread

# Settings that change the FLOPs of a token (the head count does not: 12·L·H·Q·T = 12·L·n_embd·T): a run whose
# stated configuration changes one has its FLOPs per token counted again.
FLOP_SETTINGS = ("n_layer", "n_embd", "block_size", "vocab_size")

# nanoGPT echoes its config file ("key = value  # comment") and each --key=value override
# ("Overriding: key = value") into its log through configurator.py.
_CONFIG_LINE = re.compile(r"^(?:Overriding: )?([a-z_][a-z0-9_]*) = (.+?)(?:\s+#.*)?$")
_TOKENS_PER_ITER_LINE = re.compile(r"tokens per iteration will be: ([\d,]+)")
_BARE_WORD = re.compile(r"[\w.:/-]+")


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
        if file.name.endswith((".jsonl", ".jsonl.gz")):  # a recording, gzipped or not
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
    if not isinstance(document, dict) or document.get("schema") not in (*READ_SNAPSHOT_SCHEMAS, PROBE_SCHEMA):
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
    shares: dict[str, float] = {activity: samples / main_thread.samples
                                for activity, samples in main_thread.by_activity.items()}
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
        flops_per_token=None if any(key in stated for key in FLOP_SETTINGS) else resolved.flops_per_token,
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
# before the snapshot carried them as data (pace_inputs).
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
    return _resolved_from_pace_lines(document)


def _resolved_from_pace_lines(document: Mapping[str, Any]) -> _Resolved:
    """What a snapshot written before pace_inputs says it resolved, read from its pace's lines and figures."""
    pace = (document.get("progress") or {}).get("baseline") or {}
    lines = [line for line in pace.get("lines") or () if isinstance(line, str)]
    tokens, tokens_from = _positive(pace.get("tokens_per_iter")), None
    assumed = pace.get("tokens_per_iter_assumed") is True
    for line in lines:
        if (said := _TOKENS_LINE.match(line)) is not None:
            tokens_from = said.group(2)
    shape: str | None = None
    shape_from: str | None = None
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
                if (setting := _CONFIG_LINE.match(text)) is not None and \
                        (value := _setting_value(setting.group(2))) is not None:
                    config[setting.group(1)] = value
                elif (tokens_line := _TOKENS_PER_ITER_LINE.search(text)) is not None:
                    printed_tokens = int(tokens_line.group(1).replace(",", ""))
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


def _tokens_per_iter(flag: int | None, read: int | None, read_from: str | None,
                     config: Mapping[str, Any]) -> tuple[int | None, str | None]:
    if flag:
        return flag, "--tokens-per-iter"
    if read:
        return read, read_from
    factors = [config.get(key) for key in ("batch_size", "block_size", "gradient_accumulation_steps")]
    counts = [factor for factor in factors if isinstance(factor, int) and factor > 0]
    if len(counts) == len(factors):
        batch, block, accumulation = counts
        return batch * block * accumulation, "batch_size × block_size × gradient_accumulation_steps"
    return None, None


def _shape(config: Mapping[str, Any]) -> GptShape | None:
    """The GPT shape the configuration names, or None when it lacks layers, width or block size. The head count
    changes neither the parameters nor the attention FLOPs (12·L·H·Q·T = 12·L·n_embd·T): one head stands in."""
    values = [config.get(key) for key in ("n_layer", "n_embd", "block_size")]
    sizes = [value for value in values if isinstance(value, int) and value > 0]
    if len(sizes) != len(values):
        return None
    n_layer, n_embd, block_size = sizes
    n_head = config.get("n_head")
    vocab = config.get("vocab_size")
    shape = GptShape(n_head=n_head if isinstance(n_head, int) and n_head > 0 else 1,
                     vocab_size=vocab if isinstance(vocab, int) and vocab > 0 else DEFAULT_VOCAB,
                     bias=config.get("bias") is True, n_layer=n_layer, n_embd=n_embd, block_size=block_size)
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


def _setting_value(text: str) -> Any:
    """A config line's value, where it is one: a Python literal (nanoGPT's config files: `batch_size = 12`,
    `dataset = 'openwebtext'`) or a bare word (its "Overriding: dataset = shakespeare_char"). None for code: a source
    line a warning quotes (`cpu = _conversion_method_template(device=torch.device("cpu"))`) matches `key = value`
    and is no setting."""
    try:
        return literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text if _BARE_WORD.fullmatch(text) else None


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
