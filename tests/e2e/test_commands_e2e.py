"""The command registry (tui/commands/COMMANDS) and what each command must come with: a distinct name, a
--help that runs, its line in `gputop --help`, its row in docs/commands.md, and the options it shares with
other commands taken from tui/commands/shared.py rather than declared again.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tui.commands import COMMANDS

REPO = Path(__file__).resolve().parents[2]
COMMANDS_DOC = REPO / "docs" / "commands.md"

# Flags a command declares for itself on purpose: another option that happens to share a shared one's
# spelling, so it is not checked against the shared declaration.
SAME_SPELLING_OTHER_OPTION = {
    ("probe", "--model"): "the model the probe builds: a preset or custom, with shape overrides",
    ("probe", "--dtype"): "the dtype the probe trains in (auto by default), not which peak is read",
    ("mfu", "--model"): "the model the arithmetic is for: a preset, custom or a config.json, with shape overrides",
    ("mfu", "--tokens-per-iter"): "defaults to batch × block × grad-accum; no job's pace is compared",
    ("compare", "--tokens-per-iter"): "two counts, A's and B's, one for each run compared",
}


def command_id(command) -> str:
    return command.name or "default"


def gputop(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200")  # wide: a help line is never wrapped
    return subprocess.run([sys.executable, "-m", "tui", *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO, env=env, check=False)


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS, ids=command_id)
def test_every_command_has_a_help_that_runs(command):
    argv = [command.name, "--help"] if command.name else ["--help"]
    result = gputop(*argv)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: gputop {command.name or ''}".rstrip())
    assert result.stderr == ""


@pytest.mark.slow
def test_gputop_help_lists_every_command():
    listing = gputop("--help").stdout
    for command in COMMANDS:
        if command.name is None:
            assert command.help in listing  # the default command's line is gputop's own description
        else:
            assert re.search(rf"^\s+{re.escape(command.name)}\s+{re.escape(command.help)}$", listing, re.MULTILINE), (
                f"gputop --help does not list {command.name}")
