"""The command registry (tui/commands/COMMANDS) and what each command must come with: a distinct name, a
--help that runs, its line in `gputop --help`, its row in docs/commands.md, and the options it shares with
other commands taken from tui/commands/shared.py rather than declared again.
"""

from __future__ import annotations

import argparse
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tui.cli import build_parser
from tui.commands import COMMANDS, shared

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


def command_parsers() -> dict[str | None, argparse.ArgumentParser]:
    """Each command's parser by command name: gputop's own for the default, the subparser for the others."""
    parser = build_parser()
    parsers: dict[str | None, argparse.ArgumentParser] = {None: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            parsers.update(action.choices)
    return parsers


def test_command_names_are_distinct_and_one_command_is_the_default():
    names = [command.name for command in COMMANDS]
    assert len(names) == len(set(names)), names
    assert names.count(None) == 1, "exactly one default command: the one whose options are gputop's own"
    assert set(command_parsers()) == set(names)


def shared_declarations() -> dict[str, argparse.Action]:
    """Every option tui/commands/shared.py declares, by flag, from each of its add_* functions in turn."""
    declared: dict[str, argparse.Action] = {}
    for name, add in inspect.getmembers(shared, inspect.isfunction):
        if not name.startswith("add_"):
            continue
        scratch = argparse.ArgumentParser(add_help=False)
        add(scratch)
        for action in scratch._actions:
            declared.update(dict.fromkeys(action.option_strings, action))
    return declared


def declaration(action: argparse.Action) -> tuple:
    return (type(action), action.dest, action.type, action.default, action.choices, action.metavar,
            action.nargs, action.const, action.help)


def test_options_that_commands_share_are_declared_once_in_shared():
    declared = shared_declarations()
    assert {"--pid", "--interval", "--rate", "--log", "--hang-after", "--tokens-per-iter", "--baseline",
            "--model"} <= set(declared)
    taken_by: dict[str, list[str]] = {}
    for name, parser in command_parsers().items():
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in declared or (name, flag) in SAME_SPELLING_OTHER_OPTION:
                    continue
                taken_by.setdefault(flag, []).append(name or "gputop")
                assert declaration(action) == declaration(declared[flag]), (
                    f"{name or 'gputop'} declares {flag} itself: take it from tui/commands/shared.py")
    # The options the issue found declared twice are now shared by these commands.
    for flag in ("--interval", "--rate", "--log", "--hang-after"):
        assert {"gputop", "serve"} <= set(taken_by[flag]), flag


def test_interval_help_is_the_same_for_gputop_and_serve():
    parsers = command_parsers()
    helps = {name: next(a.help for a in parsers[name]._actions if "--interval" in a.option_strings)
             for name in (None, "serve", "demo")}
    assert len(set(helps.values())) == 1, helps


def doc_rows() -> list[list[str]]:
    """The cells of each row of docs/commands.md's command table."""
    rows = []
    for line in COMMANDS_DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("| `gputop"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def module_path(command) -> str:
    return type(command).__module__.replace(".", "/") + ".py"


@pytest.mark.parametrize("command", COMMANDS, ids=command_id)
def test_every_command_has_a_row_in_the_docs(command):
    rows = [row for row in doc_rows() if module_path(command) in row[-1]]
    assert len(rows) == 1, f"docs/commands.md needs one row for {module_path(command)}"
    invocation = rows[0][0]
    if command.name is not None:
        assert invocation.startswith(f"`gputop {command.name}"), invocation
    else:
        assert invocation.startswith("`gputop --"), invocation


def test_every_row_in_the_docs_is_a_command():
    modules = {module_path(command) for command in COMMANDS}
    for row in doc_rows():
        assert any(module in row[-1] for module in modules), f"docs/commands.md lists no command: {row[0]}"
