"""How the real gputop ends (issue 37): Ctrl-C and SIGINT in the TUI give exit status 130, as docs/commands.md lists;
a run with --record says on stderr where the recording went and how many frames it holds, in the TUI and headless.
Real gputop processes in a real terminal (tmux), on a real target and on a recorded one."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import psutil
import pytest
from support.cli import gputop, ready
from support.paths import REPO
from support.processes import wait_for
from support.recorded import frames_so_far
from support.tmux import TMUX_MARKS, Tmux

pytestmark = TMUX_MARKS  # tmux and py-spy, or skip; slow

RECORDING = REPO / "tests" / "fixtures" / "recordings" / "data_bound.jsonl"


@pytest.fixture
def tmux(request):
    session = Tmux(request.node.name.replace("[", "-").replace("]", ""))
    yield session
    session.kill()


def _gputop_in(tmux: Tmux) -> psutil.Process:
    """The gputop process the tmux window's shell runs."""
    shell = psutil.Process(int(tmux.run("display-message", "-p", "#{pane_pid}").strip()))

    def found():
        return next((p for p in shell.children() if p.cmdline()[1:3] == ["-m", "tui"]), None)

    return wait_for(found, timeout=30)


def test_ctrl_c_in_the_live_tui_exits_130_and_says_where_the_recording_went(tmux, spawn_target, tmp_path):
    target = spawn_target("busy_loop.py", "--seconds", "300", stdout=subprocess.PIPE, ready=ready)
    record = tmp_path / "run.jsonl"
    tmux.start(f"{sys.executable} -m tui --pid {target.pid} --record {record}", 160, 48)
    tmux.wait_for(lambda s: f"PID {target.pid}" in s, 30, "the status line")
    wait_for(lambda: len(frames_so_far(record)) >= 2, timeout=60)
    tmux.keys("C-c")
    screen = tmux.wait_for(lambda s: "GPUTOP_EXIT=" in s, 30, "gputop exiting")
    assert "GPUTOP_EXIT=130" in screen and "Traceback" not in screen, screen
    said = re.search(rf"gputop: recording written to {re.escape(str(record))} \((\d+) frames\)", screen)
    assert said is not None, screen
    assert int(said.group(1)) == len(frames_so_far(record))
    assert target.poll() is None  # the target keeps running


def test_sigint_ends_the_tui_with_130(tmux):
    tmux.start(f"{sys.executable} -m tui replay {RECORDING}", 160, 48)
    tmux.wait_for(lambda s: "replay of" in s, 30, "the replay's status line")
    os.kill(_gputop_in(tmux).pid, signal.SIGINT)
    screen = tmux.wait_for(lambda s: "GPUTOP_EXIT=" in s, 30, "gputop exiting")
    assert "GPUTOP_EXIT=130" in screen and "Traceback" not in screen, screen
    assert not tmux.alternate_screen_on()  # the terminal is restored


def test_a_headless_recording_says_where_it_went_before_the_verdict(spawn_target, tmp_path):
    target = spawn_target("busy_loop.py", "--seconds", "300", stdout=subprocess.PIPE, ready=ready)
    record = tmp_path / "run.jsonl"
    result = gputop("--pid", str(target.pid), "--record", str(record), "--duration", "2")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.strip().splitlines()
    frames = len(frames_so_far(record))
    assert frames >= 1
    assert f"gputop: recording written to {record} ({frames} frame{'s' if frames != 1 else ''})" in lines, lines
    assert lines[-1].startswith("gputop: verdict: ")  # the last line is still the answer
