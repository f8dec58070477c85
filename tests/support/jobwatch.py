"""Watching a real job with the real command, for the end-to-end job tests (torchrun, Lightning, Slurm, ...).

`python -m tui <target> --snapshot OUT --record REC` runs on the job; its recording is folded through a Monitor
as it grows until the view (``watch_until``) or the job verdict (``watch_job_until``) reaches the state a test
asks for (never a fixed wait), then the command is stopped (SIGTERM: headless, it writes its snapshot) and what
it produced is returned.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from probes.monitoring.monitor import Monitor
from probes.outputs.recording import read_recording
from support.paths import REPO
from support.processes import wait_for
from support.recorded import frames_so_far

HANG_AFTER_S = 5.0
TIMEOUT_S = 120.0


class WatchedJob(NamedTuple):
    document: dict[str, Any]  # the snapshot the command wrote
    frames: list  # every frame it recorded
    jobs: list  # the job verdict after each frame, as the screen would have shown it
    stderr: str  # what it said (the note naming what it attached to)


def watch_until(target: int | list[str], tmp_path: Path, reached, *, timeout: float = TIMEOUT_S,
                env: dict[str, str] | None = None, extra_args: tuple[str, ...] = ()) -> WatchedJob:
    """Run the gputop command on `target` (a PID, or its arguments: ["--slurm-job", "12"]), with `extra_args`
    (--model, --log, ...), until the view it would show satisfies `reached(view)` (`view.latest` is the
    newest frame; a lone process has no job verdict to wait on); fails at once if the command exits first."""
    arguments = ["--pid", str(target)] if isinstance(target, int) else list(target)
    snapshot, recording = tmp_path / "snapshot.json", tmp_path / "frames.jsonl"
    for path in (snapshot, recording):
        path.unlink(missing_ok=True)
    command = subprocess.Popen(
        [sys.executable, "-m", "tui", *arguments, *extra_args, "--snapshot", str(snapshot), "--duration",
         str(timeout + 30), "--record", str(recording), "--no-gpu", "--hang-after", str(HANG_AFTER_S)],
        cwd=REPO, env=dict(env or os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    monitor = Monitor(hang_after_s=HANG_AFTER_S)
    jobs = []
    seen = 0

    def view_reached():
        nonlocal seen
        frames = frames_so_far(recording)
        views = [monitor.ingest(frame) for frame in frames[seen:]]
        jobs.extend(view.job for view in views)
        seen = len(frames)
        if command.poll() is not None:
            pytest.fail(f"gputop exited with {command.returncode}: {command.stderr.read()}")
        return bool(views) and reached(views[-1])

    try:
        wait_for(view_reached, timeout=timeout, interval=0.5)
    finally:
        command.send_signal(signal.SIGTERM)  # headless: stop now and write the snapshot
        _, stderr = command.communicate(timeout=60)
    assert command.returncode == 0, stderr
    return WatchedJob(json.loads(snapshot.read_text()), list(read_recording(recording)), jobs, stderr)


def watch_job_until(target: int | list[str], tmp_path: Path, reached, *, timeout: float = TIMEOUT_S,
                    env: dict[str, str] | None = None, extra_args: tuple[str, ...] = ()) -> WatchedJob:
    """watch_until, waiting for the job verdict it would show to satisfy `reached(job)`."""
    return watch_until(target, tmp_path, lambda view: view.job is not None and reached(view.job),
                       timeout=timeout, env=env, extra_args=extra_args)


def settled(job) -> bool:
    """The job verdict is neither provisional nor held over from before: what the screen states plainly."""
    return not any(line.startswith(("provisional:", "holding:")) for line in job.verdict.evidence)


def watch_until_ended(target_pid: int, tmp_path: Path, kill, ended=lambda view: True,
                      timeout: float = 120.0) -> WatchedJob:
    """Watch a target, call `kill()` once gputop has seen it alive, and wait for an exited verdict that `ended(view)`
    accepts; its headline is the exited one."""
    killed = []

    def said(view) -> bool:
        if not killed:
            if view.verdict.liveness != "exited" and view.latest.process(target_pid) is not None:
                kill()
                killed.append(True)
            return False
        return view.verdict.liveness == "exited" and ended(view)

    watched = watch_until(target_pid, tmp_path, said, timeout=timeout)
    verdict = watched.document["verdict"]
    assert verdict["liveness"] == "exited", verdict
    assert verdict["evidence"][0].startswith(f"PID {target_pid} has exited: "), verdict["evidence"]
    return watched
