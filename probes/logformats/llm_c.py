"""llm.c's train_gpt2.cu step line: ``step   12/5000 | loss 7.123456 (+0.12z)| norm 1.2345 (-0.50z)| lr 6.00e-04 |
512.34 ms | 41.2% bf16 MFU | 163840 tok/s`` (older builds print no MFU; the ``(z)`` outlier scores are optional too).
The time is the whole optimizer step, gradient accumulation included. Its MFU is against the GPU's own peak
(``get_flops_promised`` for the device and precision). ``gpt2_estimate_mfu`` counts 6·N + 6·L·C·T FLOP per token
(after Kaplan et al.), C = H·Q: the causal half of the attention score matrix, where gputop counts the whole
(12·L·H·Q·T), and N with the position embeddings, norms and biases in it; its tokens are one process's, so the
MFU is per GPU. ``get_flops_promised`` (llmc/mfu.h) takes the device's exact name from its own table and scales its
architecture's figure by the card's cores and clock; for a name not in it the MFU prints -100%, read as none. Its
``tok/s`` is every process's tokens of the step over the step's time, smoothed (an EMA, bias-corrected)."""

from __future__ import annotations

import re

from probes.logformats.interface import FormatParser, ProgressLine
from probes.logformats.numbers import NUMBER, number
from probes.models.convention import PrintedCount

_STEP = re.compile(
    rf"^step\s+(\d+)/(\d+)\s*\|\s*loss\s+({NUMBER}).*?\|\s*lr\s+(?:{NUMBER})\s*\|\s*(\d+\.?\d*)\s*ms\b"
    rf"(?:\s*\|\s*({NUMBER})%\s*\w+\s+MFU)?(?:\s*\|\s*(\d+\.?\d*)\s*tok/s\b)?"
)


def parse(text: str) -> ProgressLine | None:
    step = _STEP.search(text)
    if not step:
        return None
    mfu = number(step.group(5))
    return ProgressLine(
        "llm_c",
        iteration=int(step.group(1)),
        total=int(step.group(2)),
        loss=number(step.group(3)),
        seconds_per_iter=float(step.group(4)) / 1000.0 or None,
        reported_mfu_pct=mfu if mfu is not None and mfu > 0 else None,  # -100% / 0 until its estimate settles
        reported_tokens_per_s=float(step.group(6)) or None if step.group(6) else None,
    )


FORMAT = FormatParser(
    name="llm_c", parse=parse,
    printed_mfu_against="llm.c's get_flops_promised for the device",
    printed_tokens_per_s_over="every process's tokens of the step over its time, smoothed (a bias-corrected EMA)",
    printed_mfu_counts=PrintedCount(by="llm.c's gpt2_estimate_mfu", formula="6·N + 6·L·H·Q·T", attention="causal"),
)
