"""MosaicML Composer's ConsoleLogger (composer/loggers/console_logger.py): one block per logged batch, a header
naming where training is and one line per metric, each ``\\n\\t Train <name>: <value>``::

    [epoch=1][batch=16/32]:
             Train time/batch: 15
             Train loss/train/total: 2.3011
             Train wall_clock/train: 30.5021

The header alone gives the batch (``[batch=N/M]`` when the run is measured in batches; ``[epoch=E][batch=N/M]``
counts within the epoch, so the step is ``(E-1)·M + N``). Inside a block, ``time/batch`` is the absolute step and
``loss/train/total`` the loss. Composer prints no time per batch: where the SpeedMonitor callback adds
``throughput/batches_per_sec`` its inverse is the time per step; else its ``wall_clock/train`` (seconds of
training so far) over two blocks gives it (Δ wall clock / Δ batches), both said to be worked out. Without either,
the probe times the headers (the step counter).

SpeedMonitor also logs ``throughput/device/mfu`` (a fraction, ``Train throughput/device/mfu: 0.4312``) when the
model has a ``flops_per_batch``: ``flops_per_batch × batches/s ÷ world size ÷ gpu_flops_available``
(composer/callbacks/speed_monitor.py). The FLOPs are the model's own count (llm-foundry's MPT counts the whole
attention score matrix, gputop's convention; another model may count the causal half), and the peak is
Composer's ``GPU_AVAILABLE_FLOPS`` for the device name and the trainer's precision: an H100 SXM (its name has
HBM3) or any H200 989.5 TFLOP/s in bf16, 1979 in fp8; an H100 PCIe 756.5; an A100 312; a GPU not in its table
gets no MFU. It is shown as a percentage beside gputop's.

Reading the lines of a block needs the block: a metric line means nothing alone, so the reader keeps where it is
(``reader``); ``parse`` reads a header alone.
"""

from __future__ import annotations

import re

from probes.logformats.interface import FormatParser, LineParser, ProgressLine
from probes.logformats.numbers import NUMBER, number
from probes.models.convention import PrintedCount

_HEADER = re.compile(r"^(?:\[epoch=(\d+)\])?\[batch=(\d+)(?:/(\d+))?\]:?$")
_METRIC = re.compile(rf"^Train ([\w/]+): ({NUMBER})$")


def parse(text: str) -> ProgressLine | None:
    header = _HEADER.match(text)
    if not header:
        return None
    epoch, batch, per_epoch = header.group(1), int(header.group(2)), header.group(3)
    if epoch is None:  # measured in batches: the header's count is the run's
        return ProgressLine("composer", iteration=batch, total=int(per_epoch) if per_epoch else None)
    if per_epoch is None:  # no dataloader length: the batch within the epoch is no step count; the block's is
        return ProgressLine("composer", epoch=float(epoch))
    return ProgressLine("composer", iteration=(int(epoch) - 1) * int(per_epoch) + batch, epoch=float(epoch))


def reader() -> LineParser:
    """A line reader that follows Composer's blocks: their metric lines, and the wall clock between blocks."""
    in_block = False
    step: int | None = None
    previous_clock: tuple[int, float] | None = None  # (step, wall_clock/train) of the last block that printed it

    def read(text: str) -> ProgressLine | None:
        nonlocal in_block, step, previous_clock
        header = parse(text)
        if header is not None:
            in_block, step = True, header.iteration
            return header
        metric = _METRIC.match(text) if in_block else None
        if metric is None:
            in_block = False
            return None
        name, value = metric.group(1), number(metric.group(2))
        if value is None:
            return ProgressLine("composer")
        if name == "time/batch":
            step = int(value)
            return ProgressLine("composer", iteration=step)
        if name.startswith("loss/train"):
            return ProgressLine("composer", iteration=step, loss=value)
        if name == "throughput/batches_per_sec" and value > 0:
            return ProgressLine("composer", iteration=step, seconds_per_iter=1.0 / value,
                                derived_from="throughput/batches_per_sec")
        if name == "throughput/device/mfu" and value > 0:
            return ProgressLine("composer", iteration=step, reported_mfu_pct=100.0 * value)
        if name == "wall_clock/train" and step is not None:
            earlier, previous_clock = previous_clock, (step, value)
            if earlier is not None and step > earlier[0] and value > earlier[1]:
                per_step = (value - earlier[1]) / (step - earlier[0])
                return ProgressLine("composer", iteration=step, seconds_per_iter=per_step,
                                    derived_from="wall_clock/train between blocks")
        return ProgressLine("composer", iteration=step)

    return read


FORMAT = FormatParser(
    name="composer", parse=parse, reader=reader,
    printed_mfu_against="Composer's peak for the device and precision (989.5 TFLOP/s for an H100 SXM or H200 in bf16)",
    printed_mfu_counts=PrintedCount(by="Composer's SpeedMonitor", formula="the model's flops_per_batch", attention=None,
                                    model_note="llm-foundry's MPT: the whole T×T score matrix, as gputop does"),
)
