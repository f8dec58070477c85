"""Which log lines say how training is going, one module per framework's format, tried in one order.

Adding a format is one new module here (a ``parse`` function and its ``FORMAT``), its name in ``LogFormat``,
one line in ``FORMATS``, its real lines in ``tests/fixtures/logs/<name>.log`` and a row in
``docs/logformats.md``; tests/unit/test_logformats.py fails while any of these is missing. Tailing the log (and what
the probe makes of successive lines) is ``probes.sensors.progress``'s business.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import replace
from datetime import datetime
from typing import cast

from probes.logformats import (
    composer,
    deepspeed,
    fairseq,
    generic,
    hf_trainer,
    lightning,
    lightning_csv,
    litgpt,
    llm_c,
    megatron,
    modded_nanogpt,
    nanochat,
    nanogpt,
    torchtitan,
    tqdm,
)
from probes.logformats.interface import FormatParser, LineParser, LogFormat, ProgressLine

__all__ = ["FORMATS", "FormatParser", "LogFormat", "LogReader", "ProgressLine", "format_named", "forms_read",
           "known_format", "parse_line", "reported_format", "visible_text"]

# Tried in this order; the first that parses a line claims it. Each slot says what it must come before.
FORMATS: tuple[FormatParser, ...] = (
    # first: its reader must see every line to know where a batch's block ends; it claims only a block's header
    # ("[epoch=1][batch=16/32]:") and the "Train ..." lines inside a block, which no other format reads
    composer.FORMAT,
    # its config dump (train_batch_size) must reach its reader before any throughput line; generic would read
    # "global_step=N" alone, without the samples/s that give its pace
    deepspeed.FORMAT,
    # "iteration N/M | ... | lm loss: X": generic would take the iteration and loss and lose the printed time
    megatron.FORMAT,
    nanogpt.FORMAT,  # its lines carry "iter N", "loss" and "time": generic would take them and lose the mfu
    hf_trainer.FORMAT,  # a whole dict per line, a shape no other format reads: any slot before generic
    lightning.FORMAT,  # an "Epoch N:" bar is also a tqdm bar: before tqdm, or the iteration would reset per epoch
    # Its header (comma-joined names with step and epoch) is a shape no other format reads: any slot before generic.
    lightning_csv.FORMAT,
    tqdm.FORMAT,  # any other bar; before generic, which would read a bar showing step=N, loss=X and lose its rate
    # "iter N | step M: loss X, iter time: T ms": generic would take the micro-step "iter N" as the step
    litgpt.FORMAT,
    llm_c.FORMAT,  # "step N/M | loss X | ... | T ms": generic would take the step and loss without the time
    fairseq.FORMAT,  # "epoch 001: N / M loss=X, ..., ups=U, num_updates=K": the step is num_updates, no other field
    torchtitan.FORMAT,  # "step: N  loss: X ... tps: T": generic would take the step and loss and miss its throughput
    # "step:N/T train_time:Tms step_avg:Ams": a shape no other format reads (no space after "step:"), so any slot
    # before generic; its reader works the time per step out of train_time, which no other format prints
    modded_nanogpt.FORMAT,
    # "step N/T (P%) | loss: X | ... | dt: Dms | tok/sec: K | bf16_mfu: M": generic takes the step, loss and dt and
    # drops the tok/sec and MFU
    nanochat.FORMAT,
    generic.FORMAT,  # last: any step number with a time or a loss, so every specific format must come first
)

_BY_NAME: dict[LogFormat, FormatParser] = {parser.name: parser for parser in FORMATS}
# The shape generic (the last format) reads in any script's own lines: what a log no format knows can print.
_GENERIC_SHAPE = 'generic: a step number with a time or a loss, as in "step 120 | loss 2.29 | time 520ms"'


def forms_read() -> str:
    """The formats in the order they are tried, generic's shape last: what gputop looks for, said where a log has
    shown no line it reads."""
    return ", ".join(parser.name for parser in FORMATS if parser.name != "generic") + f"; {_GENERIC_SHAPE}"


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# A leading date and time (logging's default, ISO 8601), possibly after a bracket or a logger's own tag
# (torchtitan's "[titan] "): when the line was written.
_TIMESTAMP = re.compile(r"^(?:\[\w+\] )?\W{0,2}(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?")


def visible_text(line: str) -> str:
    """The line as a terminal shows it: ANSI escapes and surrounding whitespace removed."""
    return _ANSI.sub("", line).strip()


class LogReader:
    """Reads one log's lines in the order they were written: each line goes to the formats in FORMATS' order until
    one claims it, and formats that read with state (a ``reader``) keep it for this log only."""

    def __init__(self) -> None:
        self._parsers: tuple[LineParser, ...] = tuple(parser.reader() if parser.reader is not None else parser.parse
                                                      for parser in FORMATS)

    def read(self, line: str) -> ProgressLine | None:
        return _claim(line, self._parsers)


_LINE_ALONE: tuple[LineParser, ...] = tuple(parser.parse for parser in FORMATS)


def parse_line(line: str) -> ProgressLine | None:
    """What one log line read alone says about training progress, or None when it is not a progress line."""
    return _claim(line, _LINE_ALONE)


def _claim(line: str, parsers: tuple[LineParser, ...]) -> ProgressLine | None:
    text = visible_text(line)
    if not text:
        return None
    parsed = next((record for parse in parsers if (record := parse(text)) is not None), None)
    if parsed is None:
        return None
    stamp = _line_timestamp(text)
    return replace(parsed, timestamp=stamp) if stamp is not None else parsed


def format_named(name: LogFormat) -> FormatParser:
    return _BY_NAME[name]


def known_format(name: str | None) -> FormatParser | None:
    """The parser of a format name read back from a frame or a recording (which another version of gputop may
    have written), or None when this version has no such format."""
    # Any str may be asked: one that is no LogFormat of this version is simply not found.
    return _BY_NAME.get(cast(LogFormat, name)) if name is not None else None


def reported_format(line_format: LogFormat, seen: Collection[LogFormat]) -> LogFormat:
    """The format a line counts as in a log where the formats ``seen`` have appeared: the first format seen
    that supersedes the line's own (HF Trainer's bar is a tqdm bar), else the line's own."""
    return next((parser.name for parser in FORMATS if line_format in parser.supersedes and parser.name in seen),
                line_format)


def _line_timestamp(text: str) -> float | None:
    match = _TIMESTAMP.match(text)
    if not match:
        return None
    try:
        when = datetime.strptime(f"{match.group(1)} {match.group(2)}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    fraction = match.group(3)
    return when.timestamp() + (int(fraction) / 10 ** len(fraction) if fraction else 0.0)
