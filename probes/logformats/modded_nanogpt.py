"""KellerJordan/modded-nanogpt's train_gpt.py (the GPT-2 speedrun), printed through its ``print0`` (rank 0; to
stdout with ``console=True``, always to ``logs/<run_id>.txt``)::

    step:42/1285 train_time:4871ms step_avg:115.98ms
    step:250/1285 val_loss:4.2791 train_time:29180ms step_avg:116.72ms

Read from modded-nanogpt f411b3d (2026-08; train_gpt.py last changed in 91955ec): the training loop's two
print0 f-strings. Older records print ``train_loss:X`` on step lines, ``train_time`` in seconds
(``train_time:22.870s``) and ``step_avg:nanms`` before their timing starts; all are read.

- ``step:N/T``: N optimizer steps done of T (a val line runs before step N+1: the count of the line before it).
- ``train_time``: milliseconds of training since the clock started, validation excluded: the loop stops the
  clock (a device synchronize) before each validation and restarts it after. The kernels' warm-up steps run
  before the clock starts; records before 2025 restarted it after step 10 instead, so train_time falls back once.
  On step lines it is read without a synchronize (``approx_training_time_ms``): the host may be a step ahead of
  the GPU, which evens out over a few lines.
- ``step_avg``: train_time / N, the average over every timed step since the clock started (in older records
  since the warm-up's end): a run-long average, not the current step's time, so it is not read as the pace.

The time per step is worked out from train_time between step lines (the reader keeps the last few): the job's own
clock, validation left out. A line read alone gives the step only, and the step counter times it.
"""

from __future__ import annotations

import re
from collections import deque

from probes.logformats.interface import FormatParser, LineParser, ProgressLine
from probes.logformats.numbers import NUMBER, number

_LINE = re.compile(
    rf"^step:(\d+)/(\d+)(?: val_loss:({NUMBER}))?(?: train_loss:({NUMBER}))? "
    rf"train_time:(\d+\.?\d*)(ms|s) step_avg:(?:{NUMBER})ms\b"
)
# Step lines whose train_time the time per step is worked out over: the host runs ahead of the GPU by up to a
# step or so between synchronizes, so one line's difference jitters; ten lines of a ~100 ms step are one second.
LINES_ACROSS = 10
DERIVED_FROM = "train_time between step lines"


def _read(text: str) -> tuple[ProgressLine, float] | None:
    """The line's step, total and loss, and its train_time in seconds."""
    line = _LINE.match(text)
    if not line:
        return None
    train_time = float(line.group(5)) / (1000.0 if line.group(6) == "ms" else 1.0)
    return ProgressLine("modded_nanogpt", iteration=int(line.group(1)), total=int(line.group(2)),
                        loss=number(line.group(4))), train_time  # train_loss: a val line's loss is no training loss


def parse(text: str) -> ProgressLine | None:
    read = _read(text)
    return read[0] if read is not None else None


def reader() -> LineParser:
    """A line reader that works out the time per step from train_time over the last LINES_ACROSS lines."""
    clock: deque[tuple[int, float]] = deque(maxlen=LINES_ACROSS + 1)  # (step, train_time)

    def read(text: str) -> ProgressLine | None:
        line = _read(text)
        if line is None:
            return None
        record, train_time = line
        step = record.iteration
        assert step is not None  # _read always reads one
        if clock and (step < clock[-1][0] or train_time < clock[-1][1]):
            clock.clear()  # a new run, or the clock restarted after the warm-up steps (records before 2025)
        if not clock or step > clock[-1][0]:
            clock.append((step, train_time))
        else:
            clock[-1] = (step, train_time)  # the val line and the step line of one step: the later clock
        (first_step, first_time), (last_step, last_time) = clock[0], clock[-1]
        if last_step > first_step and last_time > first_time:
            return ProgressLine("modded_nanogpt", iteration=step, total=record.total, loss=record.loss,
                                seconds_per_iter=(last_time - first_time) / (last_step - first_step),
                                derived_from=DERIVED_FROM)
        return record

    return read


FORMAT = FormatParser(name="modded_nanogpt", parse=parse, reader=reader)
