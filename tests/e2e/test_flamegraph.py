"""Sharing what gputop saw: `--flamegraph FILE` has py-spy draw the job over a headless run (SVG, or speedscope
JSON by the suffix), and `replay REC --speedscope FILE` turns a recording's samples into a speedscope file.
Real target, real py-spy, the real command; both files hold stacks and paths, so both are 0600.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from support.paths import REPO

pytestmark = pytest.mark.slow


def gputop(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tui", *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))


def mode_of(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_flamegraph_svg_of_a_live_run_is_py_spys_drawing_of_the_job(spawn_target, tmp_path):
    target = spawn_target("busy_loop.py", "--seconds", "600")
    svg = tmp_path / "out.svg"
    svg.write_text("")
    os.chmod(svg, 0o644)  # an existing file: its mode must not leak the stacks
    result = gputop("--pid", str(target.pid), "--flamegraph", str(svg), "--duration", "4", "--no-gpu")
    assert result.returncode == 0, result.stderr
    assert f"flamegraph of PID {target.pid} and its children written to {svg}" in result.stderr
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert "train_step_for_gputop" in text  # the target's own function, drawn by py-spy
    assert mode_of(svg) == 0o600


def test_flamegraph_json_is_a_speedscope_file(spawn_target, tmp_path):
    target = spawn_target("busy_loop.py", "--seconds", "600")
    out = tmp_path / "out.json"
    result = gputop("--pid", str(target.pid), "--flamegraph", str(out), "--duration", "4", "--no-gpu")
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    assert "speedscope" in document["$schema"]
    assert any(frame["name"] == "train_step_for_gputop" for frame in document["shared"]["frames"])
    assert mode_of(out) == 0o600


def test_flamegraph_of_a_process_that_is_gone_says_why_in_one_line(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    result = gputop("--pid", str(gone.pid), "--flamegraph", str(tmp_path / "x.svg"), "--duration", "2")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr


def test_flamegraph_to_stdout_is_refused_with_what_to_do():
    result = gputop("--pid", str(os.getpid()), "--flamegraph", "-", "--duration", "2")
    assert result.returncode == 2 and "--flamegraph out.svg" in result.stderr


def test_a_recording_replays_into_a_speedscope_file_of_its_samples(spawn_target, tmp_path):
    target = spawn_target("busy_loop.py", "--seconds", "600")
    recording = tmp_path / "run.jsonl"
    result = gputop("--pid", str(target.pid), "--record", str(recording), "--duration", "5", "--no-gpu",
                    "--snapshot", str(tmp_path / "snap.json"))
    assert result.returncode == 0, result.stderr
    out = tmp_path / "run.speedscope.json"
    result = gputop("replay", str(recording), "--speedscope", str(out))
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    assert mode_of(out) == 0o600
    frames = document["shared"]["frames"]
    main = document["profiles"][0]  # the busiest thread first: the target's main thread
    assert main["name"] == f"PID {target.pid} · main thread", [p["name"] for p in document["profiles"]]
    assert len(main["samples"]) == len(main["weights"]) and main["endValue"] == sum(main["weights"]) > 0
    # Root first, as speedscope reads a stack: <module> at the bottom, the loop's function above it.
    hottest = main["samples"][main["weights"].index(max(main["weights"]))]
    names = [frames[i]["name"] for i in hottest]
    assert names[0] == "<module>" and "train_step_for_gputop" in names, names
    # Every sample the recording kept is in the file, once.
    snapshot_samples = sum(
        count["count"] for line in recording.read_text().splitlines()[1:]
        for count in json.loads(line)["stacks"]["counts"])
    assert sum(sum(p["weights"]) for p in document["profiles"]) == snapshot_samples


def test_a_recording_without_samples_is_said_plainly(spawn_target, tmp_path):
    target = spawn_target("busy_loop.py", "--seconds", "600")
    recording = tmp_path / "run.jsonl"
    result = gputop("--pid", str(target.pid), "--record", str(recording), "--duration", "2", "--no-gpu",
                    "--no-stacks", "--snapshot", str(tmp_path / "snap.json"))
    assert result.returncode == 0, result.stderr
    result = gputop("replay", str(recording), "--speedscope", str(tmp_path / "x.json"))
    assert result.returncode == 2 and "holds no stack samples" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
