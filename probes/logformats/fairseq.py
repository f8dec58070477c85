"""fairseq's training log (fairseq/logging/progress_bar.py) as it is written to a file: tqdm bars fall back to the
``simple`` format when stderr is not a terminal, ``epoch 001:    100 / 1000 loss=9.123, ..., wps=2048, ups=0.5,
wpb=4096, ..., num_updates=100, ...``; ``--log-format json`` writes the same figures as a JSON object after the
logger's ``| INFO | train_inner |`` prefix; the end of an epoch prints ``epoch 001 | loss 9.1 | ... | num_updates
1000 | ...``.

The step is ``num_updates`` (optimizer updates). No time per update is printed: it is worked out as ``wpb / wps``
(words per update over words per second; the more precise figure) or else ``1 / ups`` (updates per second, rounded
to two decimals by fairseq), and said so."""

from __future__ import annotations

import json
import re

from probes.logformats.interface import FormatParser, ProgressLine
from probes.logformats.numbers import NUMBER, number

_SIMPLE = re.compile(r"\bepoch \d+(?::\s+\d+\s*/\s*\d+\s| \|)")  # an interval line, or an epoch's summary
_FIELD = re.compile(rf"(?:^|[\s,|])(loss|wps|ups|wpb|num_updates)[= ]({NUMBER})(?=[,\s|]|$)")
_JSON = re.compile(r"\{.*\"num_updates\".*\}")
_VALIDATION = re.compile(r"\| valid \||\bvalid on '")  # its wps and wpb are evaluation's, not training's


def parse(text: str) -> ProgressLine | None:
    fields = _json_fields(text) if '"num_updates"' in text else _simple_fields(text)
    updates = fields.get("num_updates")
    if updates is None:
        return None
    seconds, derived = None, None
    if fields.get("wps") and fields.get("wpb"):
        seconds, derived = fields["wpb"] / fields["wps"], "wpb / wps"
    elif fields.get("ups"):
        seconds, derived = 1.0 / fields["ups"], "ups"
    return ProgressLine("fairseq", iteration=int(updates), loss=fields.get("loss"), seconds_per_iter=seconds,
                        derived_from=derived)


def _simple_fields(text: str) -> dict[str, float]:
    if not _SIMPLE.search(text) or _VALIDATION.search(text):
        return {}
    return {name: value for name, raw in _FIELD.findall(text) if (value := number(raw)) is not None}


def _json_fields(text: str) -> dict[str, float]:
    match = _JSON.search(text)
    if not match:
        return {}
    try:
        logged = json.loads(match.group(0))
    except ValueError:
        return {}
    if not isinstance(logged, dict):
        return {}
    return {name: value for name in ("loss", "wps", "ups", "wpb", "num_updates")
            if (value := number(str(logged.get(name)))) is not None}


FORMAT = FormatParser(name="fairseq", parse=parse)
