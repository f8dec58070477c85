"""The real command in a real terminal: a private tmux server (its own -L socket, so a person's sessions are never
touched) running one window, read back with `tmux capture-pane -p`; and the marks of every test that needs one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.paths import REPO

# A tmux test is end to end, and skips where tmux or py-spy is missing.
TMUX_MARKS = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)"),
    pytest.mark.skipif(shutil.which("py-spy") is None and not (Path(sys.executable).parent / "py-spy").exists(),
                       reason="py-spy is not installed"),
]


class Tmux:
    """One private tmux server running one window."""

    def __init__(self, name: str) -> None:
        self.socket = f"gputop-test-{name}-{os.getpid()}"

    def run(self, *args: str, check: bool = True) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10)
        if check and done.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def start(self, command: str, width: int, height: int) -> None:
        # Textual takes COLUMNS / LINES over the terminal's size, and pytest's session has them set (80x24):
        # left in, every screen here would be drawn at 80x24 whatever the window's size.
        env = f"-u COLUMNS -u LINES PYTHONPATH={REPO} TERM=xterm-256color"
        self.run("new-session", "-d", "-x", str(width), "-y", str(height), "-c", str(REPO),
                 f"env {env} {command}; echo GPUTOP_EXIT=$?; sleep 60")

    def screen(self) -> str:
        return self.run("capture-pane", "-p")

    def keys(self, *keys: str) -> None:
        self.run("send-keys", *keys)

    def wait_for(self, predicate, timeout_s: float, what: str) -> str:
        deadline = time.monotonic() + timeout_s
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if predicate(screen):
                return screen
            time.sleep(0.25)
        raise AssertionError(f"{what} not on screen within {timeout_s} s; the screen was:\n{screen}")

    def alternate_screen_on(self) -> bool:
        return self.run("display-message", "-p", "#{alternate_on}").strip() == "1"

    def kill(self) -> None:
        self.run("kill-server", check=False)
