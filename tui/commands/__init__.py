"""gputop's commands: the Command protocol every command module implements, and COMMANDS, the one ordered list
tui/cli.py builds the parser from.

Adding a command is one new module here (a class with `name`, `help`, `description`, `prepare_parser` and
`run`), one line in COMMANDS, and one row in docs/commands.md; tests/unit/test_commands.py fails until all three
are there. Options that more than one command takes are declared once, in shared.py. A command module imports
its heavy parts (Textual, torch, prometheus_client) inside `run`: building the parser must stay cheap and
headless.
"""

from __future__ import annotations

import argparse
from typing import Protocol

from tui.commands.agent import AgentCommand
from tui.commands.attach import AttachCommand
from tui.commands.compare import CompareCommand
from tui.commands.demo import DemoCommand
from tui.commands.doctor import DoctorCommand
from tui.commands.mfu import MfuCommand
from tui.commands.probe import ProbeCommand
from tui.commands.replay import ReplayCommand
from tui.commands.serve import ServeCommand


class Command(Protocol):
    """One gputop command. Its three texts are read-only here, so a command may declare them as plain class
    attributes (`name = "doctor"`, `description = None`)."""

    @property
    def name(self) -> str | None:
        """The word after `gputop` (`gputop replay ...`); None for the one default command, whose options are
        gputop's own (`gputop --pid PID`)."""

    @property
    def help(self) -> str:
        """One line: the command's entry in `gputop --help` (for the default command, gputop's description)."""

    @property
    def description(self) -> str | None:
        """The paragraph at the top of the command's own --help, when one line does not say enough."""

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        """Add the command's arguments to its parser."""

    def run(self, args: argparse.Namespace) -> int:
        """Do what the arguments ask; return the exit status (tui/exitcodes.py). Raise
        tui.commands.shared.UsageError for bad input: the user sees its message as one line."""


COMMANDS: tuple[Command, ...] = (  # in the order `gputop --help` lists them
    AttachCommand(),  # gputop --pid PID: live TUI, or headless --snapshot / --record; the default
    ReplayCommand(),  # gputop replay FILE.jsonl: a recording in the TUI, or its snapshot
    DemoCommand(),  # gputop demo: a bundled training process, watched
    ServeCommand(),  # gputop serve: /metrics for Prometheus, one PID or every job on the node
    AgentCommand(),  # gputop agent: this node's frames on stdout, for a gputop on another node to merge
    ProbeCommand(),  # gputop probe: a reference GPT step timed on this GPU
    MfuCommand(),  # gputop mfu: TFLOP/s and MFU from an iteration time
    CompareCommand(),  # gputop compare A B: two runs side by side, and what made the difference
    DoctorCommand(),  # gputop doctor: what gputop can and cannot see here, and how to fix each
)
