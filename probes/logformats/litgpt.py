"""litgpt's pretrain and finetune lines: ``Epoch 1 | iter 40 step 10 | loss train: 2.345, val: n/a | iter time:
512.00 ms (step) remaining time: 0:10:00`` and ``iter 40 | step 10: loss 2.3456, iter time: 512.00 ms (step)``, and
its ``iter 40: val loss 2.1, val time: ...`` evaluation lines.

``iter`` counts micro-batches and ``step`` optimizer steps; the step is the optimizer step. The printed ``iter time``
is one micro-batch's, ``t1 - iter_t0`` around the last micro-batch before the line (litgpt/pretrain.py's fit()).
pretrain prints only every ``log_interval`` optimizer steps (``log_iter_interval = log_interval ×`` the micro-batches
per step), so the micro-batch it times is always the one that also clips, steps the optimizer and waits for the
loss (``(step)``): longer than the others (1.03 s against a 0.80 s mean on a CPU run). Its ``iter time × iter/step``
is therefore an estimate of the step, said so, and the pace's until the step counter moves (probes/pace.py); from
the second line on the pace is the counter's, and this figure a cross-check named where it disagrees."""

from __future__ import annotations

import re

from probes.logformats.interface import FormatParser, ProgressLine
from probes.logformats.numbers import NUMBER, number

_TRAIN = re.compile(
    rf"\biter (\d+)\s*\|?\s*step (\d+)\s*[:|]\s*loss(?: train)?:?\s+({NUMBER}),.*?\biter time:\s*(\d+\.?\d*)\s*ms"
)
_VALIDATION = re.compile(rf"\biter \d+: val loss ({NUMBER}), val time:")


def parse(text: str) -> ProgressLine | None:
    train = _TRAIN.search(text)
    if train:
        iters, steps = int(train.group(1)), int(train.group(2))
        micro_seconds = float(train.group(4)) / 1000.0
        per_step = iters // steps if steps > 0 else None
        return ProgressLine(
            "litgpt",
            iteration=steps,
            loss=number(train.group(3)),
            seconds_per_iter=micro_seconds * per_step if per_step and micro_seconds else None,
            derived_from=f"iter time × {per_step} micro-batches per step" if per_step and micro_seconds else None,
        )
    validation = _VALIDATION.search(text)
    if validation:  # claimed so that no other format reads its micro-batch number as the step
        return ProgressLine("litgpt")
    return None


FORMAT = FormatParser(name="litgpt", parse=parse)
