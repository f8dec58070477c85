"""karpathy/nanochat's step line, printed through its ``print0`` (rank 0's plain print) by scripts/base_train.py::

    step 00042/21400 (0.20%) | loss: 3.123456 | lrm: 1.00 | dt: 501.20ms | tok/sec: 1,046,064 | bf16_mfu: 39.67 |
    epoch: 1 pq: 0 rg: 5 | total time: 0.26m | eta: 178.6m

(one line), and by scripts/chat_sft.py without the total (``step 00042 (42.00%) | ... | mfu: 45.12 | epoch: 1 |
total time: ...``); older releases print ``mfu:`` in base_train too, and no epoch. Read from nanochat 92d63d4 (2026-07):
base_train.py's training loop, nanochat/common.py's ``get_peak_flops``, nanochat/gpt.py's ``estimate_flops``.

- ``step`` is the optimizer step just done (0-based); ``dt`` its wall time, from before the first micro-batch's
  forward to after the optimizer step and a device synchronize: gradient accumulation and the next batch's
  fetch included, evaluation and logging not. So it is the printed time per step.
- ``tok/sec`` is ``total_batch_size / dt``: every rank's tokens of the step (the whole job's), not one GPU's.
- ``bf16_mfu`` (``mfu``) is ``100 · estimate_flops() · total_batch_size / dt / (peak · world size)``: per GPU.
  ``estimate_flops`` counts 6 × the matmul weights (embeddings left out) + 12·L·H·Q·T of attention, T capped at a
  layer's sliding window: the whole score matrix, gputop's convention (PaLM's). The peak is ``get_peak_flops``
  for ``torch.cuda.get_device_name(0)``: a per-GPU bf16 dense table matched by lower-cased substrings (H100 SXM
  989e12, H100 PCIe 756e12, A100 312e12, ...), infinity for a GPU not in it and on CPU, so the MFU prints
  0.00; releases before 2026-01-17 divided by an H100 SXM's 989e12 whatever the GPU. 0.00 is read as no MFU.
"""

from __future__ import annotations

import re

from probes.logformats.interface import FormatParser, ProgressLine
from probes.logformats.numbers import NUMBER, number
from probes.logformats.peak_tables import PeakRow, PeakTable
from probes.models.convention import PrintedCount

_STEP = re.compile(
    rf"\bstep (\d+)(?:/(\d+))? \((?:{NUMBER})%\) \| loss: ({NUMBER}) \|.*?\| dt: (\d+\.?\d*)ms \| "
    rf"tok/sec: ([\d,]+) \| (?:bf16_)?mfu: ({NUMBER})\b"
)


def parse(text: str) -> ProgressLine | None:
    step = _STEP.search(text)
    if not step:
        return None
    mfu = number(step.group(6))
    return ProgressLine(
        "nanochat",
        iteration=int(step.group(1)),
        total=int(step.group(2)) if step.group(2) else None,
        loss=number(step.group(3)),
        seconds_per_iter=float(step.group(4)) / 1000.0 or None,
        reported_tokens_per_s=float(step.group(5).replace(",", "")) or None,
        reported_mfu_pct=mfu if mfu else None,  # 0.00: a peak of infinity (CPU, or a GPU not in its table)
    )


def _rows(*rows: tuple[tuple[str, ...], float]) -> tuple[PeakRow, ...]:
    return tuple(PeakRow(needles, flops) for needles, flops in rows)


# nanochat/common.py get_peak_flops, in its order ("more specific patterns first"); Intel's PVC, whose peak it
# works out from the XPU's compute units, is left out: NVML never names it.
PEAKS = PeakTable(
    by="nanochat's get_peak_flops",
    rows=_rows(
        (("gb200",), 2.5e15), (("grace blackwell",), 2.5e15), (("b200",), 2.25e15), (("b100",), 1.8e15),
        (("h200", "nvl"), 836e12), (("h200", "pcie"), 836e12), (("h200",), 989e12),
        (("h100", "nvl"), 835e12), (("h100", "pcie"), 756e12), (("h100",), 989e12),
        (("h800", "nvl"), 989e12), (("h800",), 756e12),
        (("a100",), 312e12), (("a800",), 312e12), (("a40",), 149.7e12), (("a30",), 165e12),
        (("l40s",), 362e12), (("l40-s",), 362e12), (("l40 s",), 362e12), (("l4",), 121e12),
        (("mi355",), 2.5e15), (("mi325",), 1.3074e15), (("mi300x",), 1.3074e15), (("mi300a",), 980.6e12),
        (("mi250x",), 383e12), (("mi250",), 362.1e12),
        (("5090",), 209.5e12), (("4090",), 165.2e12), (("3090",), 71e12),
    ),
    lower_cases=True,
    fallback_flops_per_s=None,
    fallback_words="divides by infinity, so its MFU prints 0.00",
)

FORMAT = FormatParser(
    name="nanochat", parse=parse,
    printed_mfu_against="nanochat's get_peak_flops row for the device",
    printed_mfu_peaks=PEAKS,
    printed_mfu_counts=PrintedCount(by="nanochat's estimate_flops", formula="6·N + 12·L·H·Q·T", attention="whole"),
    printed_tokens_per_s_over="every rank's tokens of the optimizer step (total_batch_size) over its dt",
)
