"""probes.sensors.progress: the probe on fixture logs, incremental tailing, and a live target (the line parsers are
tests/unit/test_logformats.py's)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.processes import wait_for

from probes.sensors.progress import LogProgressProbe

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


# --- a real process with stdout redirected to a file ---------------------------------------------------


@pytest.mark.slow
def test_live_target_stdout_file(spawn_target, tmp_path):
    log = tmp_path / "train.log"
    with log.open("w") as stdout:
        proc = spawn_target("nanogpt_like.py", "--interval", "0.3", stdout=stdout, stderr=stdout)
    probe = LogProgressProbe(proc.pid, tokens_per_iter=1_048_576)
    try:
        reading = wait_for(lambda: (r := probe.read()) and r.iteration is not None and r.iteration >= 6 and r,
                           timeout=20)
        assert reading.source == str(log)  # found through /proc/PID/fd/1; stderr is the same file, read once
        assert len(probe._files) == 1
        assert reading.format == "nanogpt"
        assert reading.seconds_per_iter == pytest.approx(0.3, abs=0.15)
        assert reading.tokens_per_s == pytest.approx(1_048_576 / reading.seconds_per_iter)
        assert reading.reported_mfu_pct == pytest.approx(42.0)
    finally:
        probe.close()


@pytest.mark.slow
def test_live_target_untimed_lines(spawn_target, tmp_path):
    log = tmp_path / "train.log"
    with log.open("w") as stdout:
        proc = spawn_target("nanogpt_like.py", "--interval", "0.3", "--style", "untimed", stdout=stdout)
    probe = LogProgressProbe(proc.pid)
    try:
        def timed():
            reading = probe.read()
            return reading if reading and reading.seconds_per_iter and reading.iteration >= 8 else None

        reading = wait_for(timed, interval=0.1, timeout=20)
        assert reading.format == "generic"
        assert reading.seconds_per_iter == pytest.approx(0.3, abs=0.15)
    finally:
        probe.close()


@pytest.mark.slow
def test_target_writing_to_a_pipe_needs_log(spawn_target):
    import subprocess

    proc = spawn_target("nanogpt_like.py", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    probe = LogProgressProbe(proc.pid)
    reading = probe.read()
    assert reading.source is None
    assert reading.no_pace == f"no pace: the stdout of PID {proc.pid} is a pipe: pass --log FILE"
