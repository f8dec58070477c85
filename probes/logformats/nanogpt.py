"""nanoGPT's train.py: ``iter N: loss X, time Yms, mfu Z%`` every log interval and
``step N: train loss X, val loss Y`` at each evaluation."""

from __future__ import annotations

import re

from probes.logformats.interface import FormatParser, ProgressLine
from probes.logformats.numbers import NUMBER, number
from probes.models.gpt2 import NANOGPT_COUNTS, NANOGPT_PROMISED_FLOPS

_ITERATION = re.compile(rf"\biter (\d+): loss ({NUMBER}), time (\d+\.?\d*)ms(?:, mfu ({NUMBER})%)?", re.IGNORECASE)
_EVALUATION = re.compile(rf"\bstep (\d+): train loss ({NUMBER}), val loss ({NUMBER})")


def parse(text: str) -> ProgressLine | None:
    iteration = _ITERATION.search(text)
    if iteration:
        mfu = number(iteration.group(4))
        return ProgressLine(
            "nanogpt",
            iteration=int(iteration.group(1)),
            loss=number(iteration.group(2)),
            seconds_per_iter=float(iteration.group(3)) / 1000.0,
            reported_mfu_pct=mfu if mfu is not None and mfu >= 0 else None,  # -100% until iter 5
        )
    evaluation = _EVALUATION.search(text)
    if evaluation:
        return ProgressLine("nanogpt", iteration=int(evaluation.group(1)), loss=number(evaluation.group(2)))
    return None


FORMAT = FormatParser(
    name="nanogpt",
    parse=parse,
    # its estimate_mfu divides by the A100's bf16 peak whatever the GPU (the GPT-2 family owns that convention)
    printed_mfu_against=f"an A100's {NANOGPT_PROMISED_FLOPS / 1e12:.0f} TFLOP/s",
    printed_mfu_counts=NANOGPT_COUNTS,  # 6·N + 12·L·H·Q·T: gputop's count of the GPT-2 family
)
