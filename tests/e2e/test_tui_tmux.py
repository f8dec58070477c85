"""The TUI in a real terminal: `python -m tui --pid` (and `python -m tui demo`) run inside tmux against a
real torch DataLoader loop (tui/demo_target.py, 2 workers), read back with `tmux capture-pane -p`.

Each test uses its own tmux server (-L), so a person's tmux sessions are never touched, and kills every
process it started.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from support.processes import kill_tree, stop_process_tree
from support.tmux import TMUX_MARKS, Tmux

REPO = Path(__file__).resolve().parents[2]
DEMO_TARGET = REPO / "tui" / "demo_target.py"

pytestmark = TMUX_MARKS


@pytest.fixture
def tmux(request):
    session = Tmux(request.node.name.replace("[", "-").replace("]", ""))
    yield session
    session.kill()


@pytest.fixture
def dataloader_target(tmp_path):
    """A torch training loop whose 2 DataLoader workers burn CPU in __getitem__ (the data phase only)."""
    log = open(tmp_path / "train.log", "w")  # the log probe reads the target's stdout when it is a file
    process = subprocess.Popen([sys.executable, str(DEMO_TARGET), "--phases", "data", "--workers", "2",
                                "--phase-seconds", "600"], stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    log.close()
    try:
        yield process
    finally:
        process.terminate()  # lets it unwind; then make sure nothing of its group is left
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        stop_process_tree(process)


def test_live_tui_shows_verdict_workers_and_getitem_then_help_and_quit(tmux, dataloader_target):
    tmux.start(f"{sys.executable} -m tui --pid {dataloader_target.pid}", 160, 48)
    started = time.monotonic()
    tmux.wait_for(lambda s: f"PID {dataloader_target.pid}" in s, 10, "the status line")
    first_screen_s = time.monotonic() - started
    screen = tmux.wait_for(
        lambda s: "input-bound" in s and s.count("DataLoader worker") >= 2 and "__getitem__" in s,
        60, "the data-bound verdict, both workers and __getitem__")
    assert "progressing" in screen
    assert f"PID {dataloader_target.pid}" in screen and "live every 1 s" in screen
    print(f"first screen {first_screen_s:.1f} s after start")

    tmux.run("resize-window", "-x", "80", "-y", "24")
    tmux.wait_for(lambda s: "input-bound" in s and "DataLoader worker" in s and "__getitem__" in s
                  and max(len(line) for line in s.splitlines()) <= 80, 10, "everything at 80x24")

    tmux.keys("?")
    tmux.wait_for(lambda s: "gputop keys" in s and "Quit gputop" in s, 5, "the help screen")
    tmux.keys("Escape")
    tmux.wait_for(lambda s: "gputop keys" not in s, 5, "the help screen closing")

    tmux.keys("q")
    screen = tmux.wait_for(lambda s: "GPUTOP_EXIT=" in s, 15, "gputop exiting")
    assert "GPUTOP_EXIT=0" in screen
    assert "Traceback" not in screen
    assert not tmux.alternate_screen_on()  # the terminal is restored
    assert dataloader_target.poll() is None  # quitting gputop leaves the training alone


def test_demo_starts_its_training_and_stops_it_on_quit(tmux):
    tmux.start(f"{sys.executable} -m tui demo", 160, 48)
    screen = tmux.wait_for(lambda s: s.count("DataLoader worker") >= 2, 60, "the demo's DataLoader workers")
    demo_pid = int(re.search(r"PID (\d+)", screen).group(1))
    family = [demo_pid, *(p.pid for p in psutil.Process(demo_pid).children(recursive=True))]
    tmux.keys("q")
    screen = tmux.wait_for(lambda s: "GPUTOP_EXIT=" in s, 20, "gputop demo exiting")
    assert "GPUTOP_EXIT=0" in screen and "stopped the demo training process" in screen
    # Said at once, before the seconds spent stopping it (the order: tests/unit/test_first_hour.py).
    assert screen.index("stopping the demo training process") < screen.index("stopped the demo training process")
    time.sleep(0.5)
    alive = [pid for pid in family if psutil.pid_exists(pid)
             and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    for pid in alive:
        kill_tree(pid)
    assert not alive, f"demo processes left running: {alive}"


def test_demo_without_torch_says_how_to_get_it():
    hide_torch = "import sys; sys.modules['torch'] = None; from tui.cli import main; main(['demo'])"
    done = subprocess.run([sys.executable, "-c", hide_torch], capture_output=True, text=True, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=30)
    assert done.returncode == 2
    assert done.stderr.strip() == "gputop demo needs torch: pip install 'gputop[probe]'"
