"""Megatron-LM's ``training_log`` line (megatron/training/training.py): ``[2025-08-01 07:19:37] iteration 10/ 5000 |
consumed samples: 1280 | elapsed time per iteration (ms): 12936.1 | ... | lm loss: 1.044E+01 | ...``. An iteration
is one optimizer step over the global batch; the time is the log interval's wall time divided by its iterations."""

from __future__ import annotations

import re

from probes.logformats.interface import FormatParser, ProgressLine
from probes.logformats.numbers import NUMBER, number

_ITERATION = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|")
_ELAPSED_MS = re.compile(r"\belapsed time per iteration \(ms\):\s*(\d+\.?\d*)")
_LOSS = re.compile(rf"\blm loss:\s*({NUMBER})", re.IGNORECASE)


def parse(text: str) -> ProgressLine | None:
    iteration = _ITERATION.search(text)
    elapsed = _ELAPSED_MS.search(text)
    if not iteration or not elapsed:
        return None
    loss = _LOSS.search(text)
    return ProgressLine(
        "megatron",
        iteration=int(iteration.group(1)),
        total=int(iteration.group(2)),
        seconds_per_iter=float(elapsed.group(1)) / 1000.0 or None,
        loss=number(loss.group(1)) if loss else None,
    )


FORMAT = FormatParser(name="megatron", parse=parse)
