"""The pace from every framework's log format, live: tests/targets/format_writer.py takes one optimizer step every
2.0 s of wall time and logs it in each format to its own file, and the real progress probe tails each file as the
engine does (one read a tick). Every format's pace must read 2.0 s/iter within 20%: the step counter's (probes/pace.py),
whether the log prints the time (Megatron-LM, llm.c), a throughput it is derived from (DeepSpeed, fairseq, Composer's
wall clock, litgpt's micro-batch time), or nothing (torchtitan). What each prints, worked out as its format says,
must agree with the counter: no disagreement is claimed. It waits for enough steps, never for a guessed time."""

from __future__ import annotations

import subprocess

import pytest
from support.processes import wait_for

from probes.sensors.progress import LogProgressProbe

pytestmark = pytest.mark.slow

INTERVAL_S = 2.0
TICK_S = 1.0  # the engine's default tick: how often a live probe reads
STEPS_READ = 6  # steps each probe must have seen timed before its pace is judged
FORMATS = ("megatron", "torchtitan", "deepspeed", "litgpt", "llm_c", "fairseq", "composer")


def test_every_format_reads_the_writers_pace(spawn_target, tmp_path):
    spawn_target("format_writer.py", str(tmp_path), "--interval", str(INTERVAL_S), stdout=subprocess.PIPE,
                 ready=lambda proc: all((tmp_path / f"{name}.log").exists() for name in FORMATS))
    probes = {name: LogProgressProbe(1, str(tmp_path / f"{name}.log")) for name in FORMATS}
    first: dict[str, int] = {}
    readings = {}

    def enough_steps():
        for name, probe in probes.items():
            reading = probe.read()
            if reading is None or reading.iteration is None:
                continue
            first.setdefault(name, reading.iteration)
            if reading.seconds_per_iter is not None and reading.iteration - first[name] >= STEPS_READ:
                readings[name] = reading
        return len(readings) == len(FORMATS)

    try:
        wait_for(enough_steps, timeout=INTERVAL_S * (STEPS_READ + 10), interval=TICK_S)
    finally:
        for probe in probes.values():
            probe.close()
    for name, reading in readings.items():
        assert reading.format == name
        assert reading.seconds_per_iter == pytest.approx(INTERVAL_S, rel=0.2), name
        assert reading.derived_from == "step counter", name
        assert reading.printed_seconds_per_iter is None, (name, reading)  # its own figure agrees with the counter
