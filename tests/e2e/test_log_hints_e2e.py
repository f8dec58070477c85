"""Where gputop finds no pace, it says why and what to do, for the two cases a newcomer hit (issue 20): stdout piped
into `tee` ("stdout is a pipe: pass --log FILE", naming the file tee writes), and nanoGPT's train.py writing into a
file block-buffered (python without -u: the file does not grow; say so and how to fix it). Real processes, the real
log probe; the same job unbuffered gets its pace, so the words cannot come from anything but the buffering."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.processes import wait_for

from probes.sensors.progress import BUFFERED_AFTER_S, LogProgressProbe

NANOGPT_LIKE = Path(__file__).resolve().parents[1] / "targets" / "nanogpt_like.py"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update(extra)
    return env


def _stop(*processes: subprocess.Popen) -> None:
    for process in processes:
        process.kill()
        process.wait(timeout=10)


@pytest.mark.slow
def test_piped_stdout_says_pass_log_and_names_the_file_tee_writes(tmp_path):
    log = tmp_path / "train.log"
    tee = subprocess.Popen(["tee", str(log)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    job = subprocess.Popen([sys.executable, str(NANOGPT_LIKE), "--interval", "0.1"], stdout=tee.stdin,
                           stderr=subprocess.DEVNULL, env=_env())
    tee.stdin.close()
    probe = LogProgressProbe(job.pid)
    try:
        wait_for(lambda: log.exists() and "iter" in log.read_text(), timeout=30)
        reading = probe.read()
    finally:
        probe.close()
        _stop(job, tee)
    assert reading is not None and reading.source is None
    assert f"the stdout of PID {job.pid} is a pipe: pass --log FILE" in reading.no_pace
    assert f"the pipe goes to tee, which writes {log}: --log {log}" in reading.no_pace


def _read_until(probe: LogProgressProbe, done, timeout: float):
    return wait_for(lambda: (lambda r: r if done(r) else None)(probe.read()), timeout=timeout, interval=0.5)


@pytest.mark.slow
def test_block_buffered_log_says_so_and_how_to_fix_it(tmp_path):
    log = tmp_path / "train.log"
    with open(log, "w") as out:  # nanoGPT's `python train.py > train.log`: plain print, no -u
        job = subprocess.Popen([sys.executable, str(NANOGPT_LIKE), "--interval", "0.2", "--no-flush"], stdout=out,
                               stderr=subprocess.DEVNULL, env=_env())
    probe = LogProgressProbe(job.pid)
    try:
        wait_for(lambda: log.exists() and log.stat().st_size > 0, timeout=30)  # its first line is flushed
        reading = _read_until(probe, lambda r: r is not None and "block-buffered" in (r.no_pace or ""),
                              timeout=BUFFERED_AFTER_S + 60)
    finally:
        probe.close()
        _stop(job)
    assert reading.source is None
    assert "has not grown in" in reading.no_pace
    assert "python -u" in reading.no_pace and "PYTHONUNBUFFERED=1" in reading.no_pace
    assert "--log" not in reading.no_pace  # the log is found: --log would send the user the wrong way


@pytest.mark.slow
def test_the_same_job_unbuffered_gets_its_pace(tmp_path):
    log = tmp_path / "train.log"
    with open(log, "w") as out:
        job = subprocess.Popen([sys.executable, "-u", str(NANOGPT_LIKE), "--interval", "0.2", "--no-flush"],
                               stdout=out, stderr=subprocess.DEVNULL, env=_env())
    probe = LogProgressProbe(job.pid)
    try:
        reading = _read_until(probe, lambda r: r is not None and r.iteration is not None, timeout=60)
    finally:
        probe.close()
        _stop(job)
    assert reading.format == "nanogpt"
