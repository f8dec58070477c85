"""Faults gputop must survive, each made real: py-spy killed mid-run, a target that turns unreadable or
runs a new program, a PID reused, a full disk under --record, a recording cut mid-line.

Each test waits for states (wait_for), never for a guessed time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO
from support.pilot import frames_of, pilot_test, wait_until

from probes.outputs.recording import Recorder, load_recording
from probes.sampling.pyspy_binary import find_pyspy
from tui.app import make_app

needs_pyspy = pytest.mark.skipif(find_pyspy() is None, reason="py-spy is not installed")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")

TEST_RATE_HZ = 20.0


def gputop(*args: str, **kwargs) -> subprocess.Popen:
    """The gputop command in the background; stdout and stderr are files the test reads when it ends."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, "-m", "tui", *args], env=env, cwd=REPO, **kwargs)


# --- 6. a recording cut mid-line, or damaged --------------------------------------------------------


def replay(path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tui", "replay", str(path), *args], capture_output=True,
                          text=True, timeout=60, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))


@pilot_test
async def test_tui_replay_says_what_it_skipped(tmp_path):
    source = (Path(__file__).parents[1] / "fixtures" / "recordings" / "data_bound.jsonl").read_text()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(source[: len(source) - 40])
    recording = load_recording(cut)
    assert recording.skipped and recording.frames
    app = make_app(replay_frames=recording.frames, replay_notice=recording.notice())
    notes: list[str] = []
    app.notify = lambda message, **_: notes.append(str(message))
    async with app.run_test(size=(160, 48)) as pilot:
        await wait_until(pilot, lambda: bool(notes), timeout_s=60)
        assert notes == [recording.notice()]
        assert f"replay of {len(recording.frames)} frames" in app.status_text().plain


def test_recording_again_after_a_cut_keeps_the_cut_line_apart(tmp_path):
    frames = frames_of("data_bound")
    path = tmp_path / "run.jsonl"
    recorder = Recorder(path)
    for frame in frames[:3]:
        assert recorder.append(frame)
    recorder.close()
    text = path.read_text()
    path.write_text(text[: len(text) - 30])  # the writer was killed mid-line
    again = Recorder(path)  # --record to the same file appends
    for frame in frames[3:5]:
        assert again.append(frame)
    again.close()
    recording = load_recording(path)
    assert recording.frames == (*frames[:2], *frames[3:5])
    assert [(s.number, s.why) for s in recording.skipped] == [(4, "not JSON")]
