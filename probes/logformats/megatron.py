"""Megatron-LM's ``training_log`` line (megatron/training/training.py): ``[2025-08-01 07:19:37] iteration 10/ 5000 |
consumed samples: 1280 | elapsed time per iteration (ms): 12936.1 | ... | lm loss: 1.044E+01 | ...``. An iteration
is one optimizer step over the global batch; the time is the log interval's wall time divided by its iterations.

With ``--log-throughput`` the line also has ``throughput per GPU (TFLOP/s/GPU): 402.1``: achieved TFLOP/s, not an
MFU. training_log computes it as ``num_floating_point_operations(args, batch_size) / (elapsed_time_per_iteration
* 10**12 * args.world_size)``: the global batch's model FLOPs (its transformer formula; no recomputation) over the
iteration time and every GPU of the job, tensor and pipeline ranks included. Since v0.12 that formula counts the
causal half of the attention score matrix ("causal mask (only half of the mask is non-zero)"), 6·L·H·Q·T per
token less than gputop's whole matrix; releases before counted the whole. gputop shows the figure beside its own
achieved FLOP/s, not beside an MFU, and compares it with gputop's counted Megatron's way."""

from __future__ import annotations

import re

from probes.logformats.interface import FormatParser, ProgressLine
from probes.logformats.numbers import NUMBER, number
from probes.models.convention import PrintedCount

_ITERATION = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|")
_ELAPSED_MS = re.compile(r"\belapsed time per iteration \(ms\):\s*(\d+\.?\d*)")
_LOSS = re.compile(rf"\blm loss:\s*({NUMBER})", re.IGNORECASE)
_THROUGHPUT = re.compile(rf"\bthroughput per GPU \(TFLOP/s/GPU\):\s*({NUMBER})")


def parse(text: str) -> ProgressLine | None:
    iteration = _ITERATION.search(text)
    elapsed = _ELAPSED_MS.search(text)
    if not iteration or not elapsed:
        return None
    loss = _LOSS.search(text)
    throughput = _THROUGHPUT.search(text)
    tflops = number(throughput.group(1)) if throughput else None
    return ProgressLine(
        "megatron",
        iteration=int(iteration.group(1)),
        total=int(iteration.group(2)),
        seconds_per_iter=float(elapsed.group(1)) / 1000.0 or None,
        loss=number(loss.group(1)) if loss else None,
        reported_tflops_per_gpu=tflops if tflops else None,  # 0.0 is no measurement
    )


FORMAT = FormatParser(
    name="megatron", parse=parse,
    printed_tflops_counts=("Megatron-LM's num_floating_point_operations for the global batch, attention over the "
                           "causal half of the score matrix, over the iteration time and the world size"),
    # 6·N from its GEMM shapes (norms left out), the causal half of attention: megatron/training/training.py
    printed_mfu_counts=PrintedCount(by="Megatron-LM's num_floating_point_operations", formula="6·N + 6·L·H·Q·T",
                                    attention="causal"),
)
