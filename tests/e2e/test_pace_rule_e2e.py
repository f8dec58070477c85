"""The pace's one rule (probes/pace.py), live: the step counter's rate over the window, from the first two step lines
on, whatever the log prints; the printed figure is named beside it only where it disagrees over the window, with the
ratio measured (issue 33). Each case is a real target writing its log as the program does, read by the real log
probe once a tick as the engine reads it, and timed against what the target itself recorded of its steps:

- litgpt's pretrain loop (4 micro-batches per optimizer step; it prints the one micro-batch that also steps the
  optimizer, so its iter time × 4 overstates the step),
- a real tqdm bar over uneven steps (its rate is its own moving average),
- a loop printing each whole iteration's time while two DataLoader workers hand it batches in pairs (the printed
  times alternate, and average to the counter's rate: no disagreement to claim).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from support.processes import wait_for

from probes.diagnosis.shown import pace_cross_check_line
from probes.frame import ProgressReading
from probes.sensors.progress import LogProgressProbe
from probes.view import Pace

pytestmark = pytest.mark.slow

TICK_S = 1.0  # the engine's default tick: how often a live probe reads
COUNTED_S = 10.0  # how long each case watches the counter after its first step line
TIMEOUT_S = 120.0  # torch's import and DataLoader workers on a busy 2-core machine; a wait for a state, not a pace
WITHIN = 0.10  # the issue's bound: the pace within 10% of the steps' own times
GRAIN_S = 0.01  # a file's modification time is kept at the kernel's clock tick (a few ms)


def truth_times(path: Path) -> dict[int, float]:
    """The target's own record: step -> the wall time it ended."""
    if not path.exists():
        return {}
    rows = (line.split() for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return {int(step): float(when) for when, step in rows}


def watch(probe: LogProgressProbe, enough) -> list[ProgressReading]:
    """Read the probe once a tick until enough(readings) holds; every reading with a step, oldest first."""
    readings: list[ProgressReading] = []

    def done():
        reading = probe.read()
        if reading is not None and reading.iteration is not None:
            readings.append(reading)
        return bool(readings) and enough(readings)

    try:
        wait_for(done, timeout=TIMEOUT_S, interval=TICK_S)
    finally:
        probe.close()
    return readings


def counted(readings: list[ProgressReading]) -> list[ProgressReading]:
    """The readings after the counter has moved: the window starts at the first reading's step (the first read
    that found step lines), so every later reading at a higher step has two step lines behind it."""
    return [r for r in readings if r.iteration > readings[0].iteration]


def cross_check(reading: ProgressReading) -> str | None:
    return pace_cross_check_line(Pace(iteration=reading.iteration, seconds_per_iter=reading.seconds_per_iter,
                                      derived_from=reading.derived_from,
                                      printed_seconds_per_iter=reading.printed_seconds_per_iter,
                                      printed_from=reading.printed_from))


def start_logging(spawn_target, tmp_path: Path, script: str, *args: str) -> Path:
    log = tmp_path / "train.log"
    with log.open("w") as out:
        spawn_target(script, *args, stdout=out, stderr=subprocess.STDOUT)
    return log


def assert_the_counter_is_the_pace(readings: list[ProgressReading], times: dict[int, float]) -> None:
    """Every reading once two step lines are in is the counter's, within 10% of the steps' own times over the same
    steps (from the first step read to the reading's)."""
    start = readings[0].iteration
    for reading in counted(readings):
        truth = (times[reading.iteration] - times[start]) / (reading.iteration - start)
        assert reading.seconds_per_iter == pytest.approx(truth, rel=WITHIN, abs=GRAIN_S), (reading, truth)
        assert reading.derived_from == "step counter", reading


def test_litgpt_pace_is_its_optimizer_step_counter_from_the_second_line(spawn_target, tmp_path):
    """litgpt on CPU: 4.12 s said for a 3.20 s step, overruled only after 10 s. Here a micro-batch lasts 0.15 s
    and the optimizer step adds 0.25 s to its own: steps of 0.85 s, printed as a 0.40 s micro-batch (× 4: 1.60 s)."""
    truth = tmp_path / "truth.txt"
    log = start_logging(spawn_target, tmp_path, "litgpt_pretrain.py", "--truth", str(truth))
    probe = LogProgressProbe(1, str(log))

    def counted_long_enough(readings):
        times = truth_times(truth)
        start = readings[0].iteration
        return start in times and readings[-1].iteration in times and \
            times[readings[-1].iteration] - times[start] >= COUNTED_S

    readings = watch(probe, counted_long_enough)
    assert {r.format for r in readings} == {"litgpt"}
    assert_the_counter_is_the_pace(readings, truth_times(truth))
    # The log's estimate disagrees over the window: said with what it is and the ratio measured, never "~N×"
    words = cross_check(readings[-1])
    assert words is not None, readings[-1]
    ratio = readings[-1].printed_seconds_per_iter / readings[-1].seconds_per_iter
    assert words.startswith("the log's iter time × 4 micro-batches per step averages "), words
    assert f"({ratio:.1f}× shorter)" in words and "the micro-batch that also runs the optimizer step" in words, words
    assert "~" not in words, words


def test_a_tqdm_bar_pace_is_its_counter_over_the_window(spawn_target, tmp_path):
    """A bar whose steps take 0.05 s, and every tenth 1 s more: 0.15 s a step, while the bar's own rate reads
    4.3 to 10.7 it/s between stalls (the issue's case: 11.7 it/s reported against a true 7.8 it/s)."""
    truth = tmp_path / "truth.txt"
    log = start_logging(spawn_target, tmp_path, "tqdm_stalls.py", "--truth", str(truth))
    probe = LogProgressProbe(1, str(log))

    def counted_long_enough(readings):
        times = truth_times(truth)
        start = readings[0].iteration
        return start in times and readings[-1].iteration in times and \
            times[readings[-1].iteration] - times[start] >= COUNTED_S

    readings = watch(probe, counted_long_enough)
    assert {r.format for r in readings} == {"tqdm"}
    assert_the_counter_is_the_pace(readings, truth_times(truth))
    for reading in counted(readings):  # any disagreement said is the bar's, with its ratio, never "~1×"
        words = cross_check(reading)
        assert words is None or (words.startswith("the bar's own rate averages ") and "~" not in words), words


_PRINTED = re.compile(r"^step (\d+) loss \S+ time ([\d.]+)ms$")


def test_printed_times_that_alternate_give_the_counter_pace_and_no_claim(spawn_target, tmp_path):
    """Two DataLoader workers making a batch each in 0.6 s: the loop's printed whole-iteration times alternate
    ~0.6 s and ~1 ms. The pace is the counter's, which their mean over the same lines is, and nothing is claimed
    (gputop said "the log says 0.11 s/step, but the iteration counter moves every 0.69 s (~6×)")."""
    log = start_logging(spawn_target, tmp_path, "paired_batches.py", "--item-s", "0.6")
    probe = LogProgressProbe(1, str(log))

    def printed() -> dict[int, float]:
        found = (_PRINTED.match(line) for line in log.read_text(encoding="utf-8").splitlines())
        return {int(m.group(1)): float(m.group(2)) / 1000 for m in found if m}

    def counted_long_enough(readings):
        times = printed()
        start = readings[0].iteration
        return sum(seconds for step, seconds in times.items() if start < step <= readings[-1].iteration) >= COUNTED_S

    readings = watch(probe, counted_long_enough)
    times = printed()
    assert {r.format for r in readings} == {"generic"}
    assert max(times.values()) > 10 * min(times.values()), times  # the printed times did alternate
    start = readings[0].iteration
    for reading in counted(readings):
        steps = range(start + 1, reading.iteration + 1)
        mean_printed = sum(times[step] for step in steps) / len(steps)
        assert reading.seconds_per_iter == pytest.approx(mean_printed, rel=WITHIN, abs=GRAIN_S), (reading, times)
        assert reading.derived_from == "step counter", reading
        assert reading.printed_seconds_per_iter is None and cross_check(reading) is None, reading
