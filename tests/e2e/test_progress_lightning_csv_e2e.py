"""Lightning's CSVLogger metrics.csv: the format on the file a real Trainer wrote (tests/fixtures/logs/
lightning_csv.log), and the progress probe finding the file in a process's working directory and timing its step
as the real CSVLogger flushes rows, rewrites its header, and while stdout shows nothing."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from support.paths import REPO

from probes.sensors.progress import LogProgressProbe

FIXTURE = REPO / "tests" / "fixtures" / "logs" / "lightning_csv.log"


@pytest.fixture
def idle_process(tmp_path):
    """A process whose working directory is tmp_path and whose stdout is no file (as a job under nohup to
    /dev/null, or on a terminal); killed at the end."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield proc
    proc.kill()
    proc.wait(timeout=10)


@pytest.mark.slow
def test_the_probe_times_the_step_of_the_newest_metrics_csv(idle_process, tmp_path):
    loggers = pytest.importorskip("pytorch_lightning.loggers")
    logger = loggers.CSVLogger(tmp_path, flush_logs_every_n_steps=50)  # what Trainer() makes, cwd/lightning_logs
    probe = LogProgressProbe(idle_process.pid)
    nothing = probe.read()
    assert nothing.iteration is None and "discarded" in nothing.no_pace  # stdout is /dev/null, no CSV yet

    # Trainer logs every 50th step (log_every_n_steps); this logger flushes each of those rows.
    first_written = time.time()
    logger.log_metrics({"epoch": 0, "train_loss": 0.9}, step=49)
    first = probe.read()
    first_read = time.time()
    assert (first.format, first.iteration, first.seconds_per_iter) == ("lightning_csv", 49, None)
    assert first.source == str(tmp_path / "lightning_logs" / "version_0" / "metrics.csv")

    time.sleep(0.5)  # 50 steps in about half a second: the job's pace, which the probe must read back
    second_written = time.time()
    logger.log_metrics({"epoch": 0, "train_loss": 0.8, "val_loss": 1.2}, step=99)  # a new name: the file is rewritten
    second = probe.read()
    second_read = time.time()
    assert second.iteration == 99
    # Each row is seen between its write and the read that finds it (by the file's mtime or the clock), so the
    # pace lies between these bounds however long a busy machine took over either step.
    slowest, fastest = (second_read - first_written) / 50, (second_written - first_read) / 50
    assert fastest * 0.99 <= second.seconds_per_iter <= slowest * 1.01
    logger.log_metrics({"epoch": 1, "train_loss": 0.7}, step=149)
    assert probe.read().iteration == 149
    probe.close()


@pytest.mark.slow
def test_a_log_on_stdout_is_preferred_to_the_csv(tmp_path):
    loggers = pytest.importorskip("pytorch_lightning.loggers")
    loggers.CSVLogger(tmp_path, flush_logs_every_n_steps=1).log_metrics({"epoch": 0, "train_loss": 0.9}, step=0)
    log = tmp_path / "train.log"
    log.write_text("step 7 | loss 2.5 | step_time 100ms\n")
    with log.open("a") as stdout:
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], cwd=tmp_path, stdout=stdout)
    try:
        reading = LogProgressProbe(proc.pid).read()
        assert (reading.format, reading.iteration, reading.source) == ("generic", 7, str(log))
    finally:
        proc.kill()
        proc.wait(timeout=10)
