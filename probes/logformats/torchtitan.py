"""torchtitan's metrics line (torchtitan/components/metrics.py, through its ``[titan] <time> - root - INFO -``
logger): ``step: 10  loss:  7.1234  grad_norm:  1.2345  memory: 30.12GiB(38.02%)  tps: 8,123  tflops: 120.45
mfu: 12.18%``, coloured with ANSI escapes. It prints no time per step: ``tps`` is tokens per second per device
and the tokens per step are not on the line, so the probe times successive step lines (the step counter).

Its ``mfu`` is ``num_flops_per_token × tps / gpu_peak_flops`` (components/metrics.py), the FLOPs from
``get_nparams_and_flops`` (models/utils.py): 6·(parameters less the embedding) + 6·L·H·(2·Q)·T, attention over
the whole T×T score matrix ("we follow the convention and do not account for sparsity in causal attention"),
gputop's convention; the peak is torchtitan's ``get_peak_flops`` for the device name."""

from __future__ import annotations

import re

from probes.logformats.interface import FormatParser, ProgressLine
from probes.logformats.numbers import NUMBER, number
from probes.models.convention import PrintedCount

_STEP = re.compile(rf"\bstep:\s*(\d+)\s+loss:\s*({NUMBER})\s.*\btps:\s*[\d,]+(?:.*\bmfu:\s*({NUMBER})%)?")


def parse(text: str) -> ProgressLine | None:
    step = _STEP.search(text)
    if not step:
        return None
    mfu = number(step.group(3))
    return ProgressLine("torchtitan", iteration=int(step.group(1)), loss=number(step.group(2)),
                        reported_mfu_pct=mfu if mfu else None)


FORMAT = FormatParser(
    name="torchtitan", parse=parse,
    printed_mfu_counts=PrintedCount(by="torchtitan's get_nparams_and_flops", formula="6·N + 12·L·H·Q·T",
                                    attention="whole"),
)
