"""`gputop agent` end to end: a real target, the real command, its stdout read as a merging gputop would read it.

The agent writes the recording format to stdout, each frame marked with its node; it stops when the job ends,
when its reader closes the pipe (without a traceback, and taking its py-spy children with it), or on SIGTERM;
and it never imports Textual.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from support.paths import REPO
from support.processes import wait_for

from probes.monitoring.monitor import fold
from probes.outputs.recording import RECORDING_SCHEMA, load_recording

pytestmark = pytest.mark.slow  # every test here runs `gputop agent` or a target


def start_agent(*args: str, stdout, node: str = "n7") -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), SLURMD_NODENAME=node)
    return subprocess.Popen([sys.executable, "-X", "importtime", "-m", "tui", "agent", "--interval", "0.5",
                             "--no-gpu", *args], stdout=stdout, stderr=subprocess.PIPE, env=env, text=True)


def lines_in(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def pyspy_children_of(target_pid: int) -> list[psutil.Process]:
    """py-spy processes still reading the target (the agent's children, or orphans it left behind)."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] == "py-spy" and str(target_pid) in cmdline:
            found.append(proc)
    return found


def imported_textual(stderr: str) -> bool:
    """-X importtime lists every module imported, one per line, on stderr."""
    return any(line.rstrip().endswith(("| textual", "|   textual")) or "| textual." in line
               for line in stderr.splitlines() if line.startswith("import time:"))


def test_agent_streams_frames_marked_with_its_node_that_replay_reads(spawn_target, tmp_path):
    target = spawn_target("busy_loop.py", "--seconds", "600")
    out = tmp_path / "agent.jsonl"
    with out.open("w") as handle:
        agent = start_agent("--pid", str(target.pid), stdout=handle)
    try:
        # Frames that carry stack samples: the agent reads the job as `gputop --pid` does, not just /proc.
        wait_for(lambda: any('"samples":' in line and '"samples":0' not in line for line in lines_in(out)[1:]),
                 timeout=90.0)
        agent.send_signal(signal.SIGTERM)
        _, stderr = agent.communicate(timeout=30)
    finally:
        if agent.poll() is None:
            agent.kill()
    assert agent.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert not imported_textual(stderr), "the agent imported Textual"

    header = json.loads(lines_in(out)[0])
    assert header["schema"] == RECORDING_SCHEMA
    assert header["node"] == "n7" and header["written_by"] == "gputop agent" and header["pid"] == target.pid
    recording = load_recording(out)
    assert recording.frames and all(frame.node == "n7" for frame in recording.frames)
    assert all(frame.target.pid == target.pid for frame in recording.frames)
    view = fold(recording.frames).view
    assert view is not None and view.verdict.liveness == "progressing"
    assert any("train_step_for_gputop" in line for line in view.verdict.evidence), view.verdict.evidence
    assert wait_for(lambda: not pyspy_children_of(target.pid), timeout=20.0)


def test_agent_stops_quietly_when_its_reader_goes_away(spawn_target):
    target = spawn_target("busy_loop.py", "--seconds", "600")
    agent = start_agent("--pid", str(target.pid), stdout=subprocess.PIPE)
    try:
        header = agent.stdout.readline()
        assert RECORDING_SCHEMA in header
        assert agent.stdout.readline().startswith("{")  # one frame came
        agent.stdout.close()  # the merging gputop quit
        wait_for(lambda: agent.poll() is not None, timeout=30.0)
        stderr = agent.stderr.read()
    finally:
        if agent.poll() is None:
            agent.kill()
    assert agent.returncode == 0, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr
    assert wait_for(lambda: not pyspy_children_of(target.pid), timeout=20.0)


def test_agent_following_an_idle_node_notices_its_reader_leave_without_writing():
    # No job of ours here (another test's may be: then frames come, and the closed pipe is seen on writing).
    agent = start_agent("--follow", stdout=subprocess.PIPE)
    try:
        assert RECORDING_SCHEMA in agent.stdout.readline()
        agent.stdout.close()
        wait_for(lambda: agent.poll() is not None, timeout=30.0)
        stderr = agent.stderr.read()
    finally:
        if agent.poll() is None:
            agent.kill()
    assert agent.returncode == 0 and "Traceback" not in stderr, stderr


def test_agent_ends_with_the_job_after_writing_its_last_frame(spawn_target, tmp_path):
    target = spawn_target("busy_loop.py", "--seconds", "600")
    out = tmp_path / "agent.jsonl"
    with out.open("w") as handle:
        agent = start_agent("--pid", str(target.pid), stdout=handle)
    try:
        wait_for(lambda: len(lines_in(out)) >= 3, timeout=60.0)
        target.kill()
        target.wait(timeout=10)
        wait_for(lambda: agent.poll() is not None, timeout=30.0)
        stderr = agent.stderr.read()
    finally:
        if agent.poll() is None:
            agent.kill()
    assert agent.returncode == 0, stderr
    assert f"PID {target.pid} has ended on n7" in stderr
    frames = load_recording(out).frames
    assert frames[-1].target.alive is False and frames[0].target.alive is True


def test_agent_without_a_target_says_what_to_give():
    result = subprocess.run([sys.executable, "-m", "tui", "agent"], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=60)
    assert result.returncode == 2
    assert "gputop agent --pid PID, --slurm-job JOBID, or gputop agent --follow" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
