"""torchtitan's metrics line (torchtitan/components/metrics.py, through its ``[titan] <time> - root - INFO -``
logger): ``step: 10  loss:  7.1234  grad_norm:  1.2345  memory: 30.12GiB(38.02%)  tps: 8,123  tflops: 120.45
mfu: 12.18%``, coloured with ANSI escapes. It prints no time per step: ``tps`` is tokens per second per device
and the tokens per step are not on the line, so the probe times successive step lines (the step counter).

Its ``mfu`` is ``num_flops_per_token × tps / gpu_peak_flops`` (components/metrics.py), the FLOPs from
``get_nparams_and_flops`` (models/utils.py): 6·(parameters less the embedding) + 6·L·H·(2·Q)·T, attention over
the whole T×T score matrix ("we follow the convention and do not account for sparsity in causal attention"),
gputop's convention; the peak is torchtitan's ``get_peak_flops`` for the device name (tools/utils.py): a bf16 dense
table matched by case-sensitive substrings, an A100's 312 TFLOP/s for a device no row matches (its ``"l40s"`` row is
lower case, so an "NVIDIA L40S" gets the A100's too). On a machine whose ``lspci`` shows an NVIDIA H100 it matches
those lines instead of the device name. Its ``tps`` is one device's: the tokens since the last log over the time and
the non-data-parallel degree (tensor × pipeline × context parallel). Read from torchtitan b5bcd76 (2026-08)."""

from __future__ import annotations

import re

from probes.logformats.interface import FormatParser, ProgressLine
from probes.logformats.numbers import NUMBER, number
from probes.logformats.peak_tables import PeakRow, PeakTable
from probes.models.convention import PrintedCount

_STEP = re.compile(rf"\bstep:\s*(\d+)\s+loss:\s*({NUMBER})\s.*\btps:\s*([\d,]+)(?:.*\bmfu:\s*({NUMBER})%)?")


def parse(text: str) -> ProgressLine | None:
    step = _STEP.search(text)
    if not step:
        return None
    mfu = number(step.group(4))
    return ProgressLine("torchtitan", iteration=int(step.group(1)), loss=number(step.group(2)),
                        reported_tokens_per_s=float(step.group(3).replace(",", "")) or None,
                        reported_mfu_pct=mfu if mfu else None)


# torchtitan/tools/utils.py get_peak_flops, in its order, the GPUs NVML can name (not Intel's PVC, AWS Neuron, TPUs).
PEAKS = PeakTable(
    by="torchtitan's get_peak_flops",
    rows=tuple(PeakRow(needles, flops) for needles, flops in (
        (("A100",), 312e12), (("A6000",), 154.85e12),
        (("H100", "NVL"), 835e12), (("H100", "PCIe"), 756e12), (("H100",), 989e12),
        (("H200",), 989e12), (("H20",), 148e12), (("GB200",), 2.5e15), (("GB300",), 2.5e15),
        (("B300",), 2.25e15), (("B200",), 2.25e15), (("MI355X",), 2500e12), (("MI300X",), 1300e12),
        (("MI325X",), 1300e12), (("MI250X",), 191.5e12), (("l40s",), 362e12),
    )),
    lower_cases=False,
    fallback_flops_per_s=312e12,
    fallback_words="an A100's",
)


FORMAT = FormatParser(
    name="torchtitan", parse=parse,
    printed_mfu_against="torchtitan's get_peak_flops row for the device",
    printed_mfu_peaks=PEAKS,
    printed_tokens_per_s_over="one device's tokens (the log interval's over its time and the non-data-parallel degree)",
    printed_mfu_counts=PrintedCount(by="torchtitan's get_nparams_and_flops", formula="6·N + 12·L·H·Q·T",
                                    attention="whole"),
)
