"""GIL attribution end to end: a real torch training loop beside a real background thread
(tests/targets/gil_threads.py), watched by the real command (`python -m tui --pid P --snapshot OUT --record REC`)
with real py-spy, its recording folded through a Monitor as it grows until the state a test asks for.

* a pure-Python thread (``metrics_aggregator``) that holds the GIL: the verdict is gil_contention and names it;
* a thread that keeps a core busy with the GIL released (hashlib on big buffers): GIL windows run (another
  thread works) and find it rarely holds the GIL; no gil_contention verdict, ever;
* a logger that sleeps most of the time: no gil_contention verdict, ever.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO
from support.processes import said_ready, wait_for
from support.recorded import frames_so_far

from probes.diagnosis.gil import gil_summary
from probes.monitoring.monitor import Monitor
from probes.outputs.recording import read_recording

pytestmark = pytest.mark.slow

TIMEOUT_S = 150.0
# Negative cases run until the GIL look-back (probes/diagnosis/gil.py GIL_WINDOW_S, 30 s) is full of frames
# and the verdict has settled on what the loop does, so a gil_contention verdict had every chance to come.
WATCHED_SPAN_S = 35.0


def start(spawn_target, tmp_path: Path, helper: str):
    out = tmp_path / f"gil_{helper}.out"
    handle = out.open("w")
    try:
        return spawn_target("gil_threads.py", "--helper", helper, "--seconds", "600", stdout=handle,
                            stderr=subprocess.STDOUT, timeout=90, ready=lambda proc: said_ready(out.read_text()))
    finally:
        handle.close()


def watch_until(pid: int, tmp_path: Path, reached):
    """Run the gputop command on ``pid`` until ``reached(frames, verdicts)`` holds (verdicts: the one the screen
    showed after each frame); return (snapshot document, frames, verdicts)."""
    snapshot, recording = tmp_path / "snapshot.json", tmp_path / "frames.jsonl"
    command = subprocess.Popen(
        [sys.executable, "-m", "tui", "--pid", str(pid), "--snapshot", str(snapshot), "--duration",
         str(TIMEOUT_S + 30), "--record", str(recording), "--no-gpu"],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    monitor = Monitor()
    frames, verdicts = [], []

    def state_reached():
        loaded = frames_so_far(recording)
        for frame in loaded[len(frames):]:
            frames.append(frame)
            verdicts.append(monitor.ingest(frame).verdict)
        if command.poll() is not None:
            pytest.fail(f"gputop exited with {command.returncode}: {command.stderr.read()}")
        return bool(frames) and reached(frames, verdicts)

    try:
        wait_for(state_reached, timeout=TIMEOUT_S, interval=0.5)
    except pytest.fail.Exception:
        last = verdicts[-1] if verdicts else None
        said = f"{last.bottleneck}: {' | '.join(last.evidence[:3])}" if last else "no frame"
        pytest.fail(f"the state sought did not come within {TIMEOUT_S:g} s over {len(frames)} frames; "
                    f"the last verdict was {said}")
    finally:
        command.send_signal(signal.SIGTERM)
        _, stderr = command.communicate(timeout=60)
    assert command.returncode == 0, stderr
    return json.loads(snapshot.read_text()), list(read_recording(recording)), verdicts


def _span(frames) -> float:
    return frames[-1].time - frames[0].time


def _settled_on_the_loop(frames, verdicts) -> bool:
    latest = verdicts[-1]
    return _span(frames) >= WATCHED_SPAN_S and latest.bottleneck == "cpu_bound" and not any(
        line.startswith(("provisional:", "holding:")) for line in latest.evidence)


def test_a_pure_python_thread_holding_the_gil_is_named(spawn_target, tmp_path):
    target = start(spawn_target, tmp_path, "hog")
    document, frames, verdicts = watch_until(
        target.pid, tmp_path, lambda frames, verdicts: verdicts[-1].bottleneck == "gil_contention")
    verdict = verdicts[-1]
    evidence = "\n".join(verdict.evidence)
    print(evidence)
    assert "thread metrics_aggregator, in aggregate_metrics (gil_threads.py:" in evidence, evidence
    assert "the training thread holds it" in evidence, evidence
    assert any("to a process" in line for line in verdict.advice), verdict.advice
    gil = gil_summary(frames, target.pid)
    holder = gil.busiest_other()
    assert holder is not None and holder.name == "metrics_aggregator", gil
    assert holder.held / gil.looks >= 0.35, gil
    assert document["verdict"]["bottleneck"] == "gil_contention", document["verdict"]


def test_a_thread_that_releases_the_gil_is_not_blamed(spawn_target, tmp_path):
    target = start(spawn_target, tmp_path, "releasing")

    def gil_measured_and_settled(frames, verdicts):
        gil = gil_summary(frames, target.pid)
        return gil is not None and gil.looks >= 40 and _settled_on_the_loop(frames, verdicts)

    _, frames, verdicts = watch_until(target.pid, tmp_path, gil_measured_and_settled)
    gil = gil_summary(frames, target.pid)
    print(gil)
    tokenizer = next((h for h in gil.holders if h.name == "tokenizer"), None)
    assert tokenizer is None or tokenizer.held / gil.looks < 0.2, gil  # hashing runs with the GIL released
    assert not [v for v in verdicts if v.bottleneck == "gil_contention"], [v.evidence for v in verdicts
                                                                          if v.bottleneck == "gil_contention"][:1]


def test_a_logger_that_sleeps_is_not_blamed(spawn_target, tmp_path):
    target = start(spawn_target, tmp_path, "logger")
    _, frames, verdicts = watch_until(target.pid, tmp_path, _settled_on_the_loop)
    gil = gil_summary(frames, target.pid)
    print(gil)
    if gil is not None:  # a dump caught the logger awake: GIL windows ran, and it holds the GIL little
        logger = next((h for h in gil.holders if h.name == "metrics_logger"), None)
        assert logger is None or logger.held / gil.looks < 0.1, gil
    assert not [v for v in verdicts if v.bottleneck == "gil_contention"], [v.evidence for v in verdicts
                                                                          if v.bottleneck == "gil_contention"][:1]
