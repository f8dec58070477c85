"""DeepSpeed's engine log (deepspeed/utils/timer.py, deepspeed/runtime/engine.py), every ``steps_per_print``:

- ThroughputTimer: ``epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=15.9, CurrSamplesPerSec=16.0,
  MemAllocated=6.01GB, MaxMemAllocated=19.52GB``. The step is ``global_step`` (optimizer steps). Only a throughput
  is printed: one step takes ``train_batch_size / CurrSamplesPerSec`` seconds, and the samples per step
  (``train_batch_size``, the timer's batch size) are printed once, in the config the engine dumps at start
  (``  train_batch_size ............. 32``). The reader learns it there; a log whose start it did not see gives
  the step and no time, and the probe times the step counter instead.
- ``wall_clock_breakdown`` timers: ``time (ms) | fwd: 410.2 | bwd: 820.5 | bwd_inner: ... | step: 20.1``, summed
  over the micro-steps of one optimizer step: its compute time (fwd + bwd + step), not the wall time between
  steps. Where the step counter moves slower (input, waits), the probe trusts the counter and says so. The
  per-micro-step timers (``fwd_microstep`` ...) are not a step's time and are left alone. Once the samples per
  step are known the throughput gives the step's wall time, and the timers are not taken as it.
"""

from __future__ import annotations

import re

from probes.logformats.interface import FormatParser, LineParser, ProgressLine
from probes.logformats.numbers import NUMBER, number

_THROUGHPUT = re.compile(rf"\bglobal_step=(\d+), RunningAvgSamplesPerSec=({NUMBER}), CurrSamplesPerSec=({NUMBER})")
_BATCH_SIZE = re.compile(r"^train_batch_size \.+ (\d+)$")  # after the logger's "[...]" prefix
_TIMERS = re.compile(r"\btime \(ms\)((?: \| \w+: \d+\.?\d*)+)")
_TIMER = re.compile(r"(\w+): (\d+\.?\d*)")
_STEP_TIMERS = ("fwd", "bwd", "step")


def parse(text: str) -> ProgressLine | None:
    return _parse(text, samples_per_step=None)


def _parse(text: str, samples_per_step: int | None) -> ProgressLine | None:
    """A throughput or timer line; ``samples_per_step`` is the train_batch_size seen earlier in the log, if any."""
    throughput = _THROUGHPUT.search(text)
    if throughput:
        samples_per_s = number(throughput.group(3))
        if samples_per_step and samples_per_s and samples_per_s > 0:
            return ProgressLine("deepspeed", iteration=int(throughput.group(1)),
                                seconds_per_iter=samples_per_step / samples_per_s,
                                derived_from=f"CurrSamplesPerSec ÷ {samples_per_step} samples per step")
        return ProgressLine("deepspeed", iteration=int(throughput.group(1)))
    timers = _TIMERS.search(text)
    if timers:
        elapsed = dict(_TIMER.findall(timers.group(1)))
        if samples_per_step:  # the throughput times the whole step; the timers only its compute
            return ProgressLine("deepspeed")
        if all(name in elapsed for name in _STEP_TIMERS):
            compute = sum(float(elapsed[name]) for name in _STEP_TIMERS) / 1000.0
            return ProgressLine("deepspeed", seconds_per_iter=compute or None,
                                derived_from="fwd + bwd + step timers (compute only)")
    return None


def reader() -> LineParser:
    """A line reader that remembers the samples per step from the engine's config dump."""
    samples_per_step: int | None = None

    def read(text: str) -> ProgressLine | None:
        nonlocal samples_per_step
        batch_size = _BATCH_SIZE.search(text[text.rfind("]") + 1:].strip()) if "train_batch_size" in text else None
        if batch_size:
            samples_per_step = int(batch_size.group(1)) or None
            return None  # a config line, not progress
        return _parse(text, samples_per_step)

    return read


FORMAT = FormatParser(name="deepspeed", parse=parse, reader=reader)
