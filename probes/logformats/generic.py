"""Any other training script's own line: a step number (``step``, ``iter``, ``global_step``, ``batch`` …, with an
optional ``/total``) together with a time per step or a loss, e.g. ``step 120/5000 | loss 2.29 | step_time 520ms``.
A bare ``step 5`` is too common in ordinary messages to count."""

from __future__ import annotations

import re

from probes.logformats.interface import FormatParser, ProgressLine
from probes.logformats.numbers import NUMBER, number

_STEP = re.compile(r"\b(?:global_step|step|iteration|iter|it|batch)\b\s*[:=#]?\s*(\d+)(?:\s*/\s*(\d+))?",
                   re.IGNORECASE)
_TIME = re.compile(
    r"\b(?:step_time|iter_time|batch_time|time_per_step|time|dt)\b\s*[:=]?\s*(\d+\.?\d*)\s*(ms|s|sec)?\b",
    re.IGNORECASE,
)
_LOSS = re.compile(rf"\bloss\b\s*[:=]?\s*({NUMBER})", re.IGNORECASE)


def parse(text: str) -> ProgressLine | None:
    step = _STEP.search(text)
    if not step:
        return None
    elapsed = _TIME.search(text)
    loss = _LOSS.search(text)
    if not elapsed and not loss:
        return None
    spi = None
    if elapsed:
        spi = float(elapsed.group(1)) / (1000.0 if (elapsed.group(2) or "").lower() == "ms" else 1.0)
    return ProgressLine(
        "generic",
        iteration=int(step.group(1)),
        total=int(step.group(2)) if step.group(2) else None,
        seconds_per_iter=spi if spi else None,
        loss=number(loss.group(1)) if loss else None,
    )


FORMAT = FormatParser(name="generic", parse=parse)
