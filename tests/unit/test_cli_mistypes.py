"""A mistyped flag or command on gputop's parser (tui/cli.py): one line on stderr naming what was mistyped and the
nearest known spelling, exit status 2, no traceback. argparse alone named the wrong thing: `gputop --pdi 1234`
said "argument COMMAND: invalid choice: '1234'"."""

from __future__ import annotations

import pytest

from tui.cli import run
from tui.exitcodes import EXIT_USAGE


def usage_error(capsys, *argv: str) -> str:
    """The one line gputop says for `argv`, which must end it with exit status 2."""
    with pytest.raises(SystemExit) as ended:
        run(list(argv))
    assert ended.value.code == EXIT_USAGE
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and captured.out == "", captured
    assert "Traceback" not in captured.err
    return lines[0]


@pytest.mark.parametrize("argv, line", [
    (["--pdi", "1234"], "gputop: unknown option --pdi: did you mean --pid?"),
    (["--duratoin", "5"], "gputop: unknown option --duratoin: did you mean --duration?"),
    (["--pid", "1", "--snapshot", "-", "--duratoin", "5"],
     "gputop: unknown option --duratoin: did you mean --duration?"),
    # a command's own options are looked up on that command
    (["doctor", "--jsno"], "gputop: unknown option --jsno: did you mean --json?"),
    (["replay", "--snapshto", "out.json", "run.jsonl"], "gputop: unknown option --snapshto: did you mean --snapshot?"),
])
def test_a_mistyped_option_is_named_with_the_nearest_known_one(capsys, argv, line):
    assert usage_error(capsys, *argv) == line


def test_an_option_like_no_known_one_is_named_without_a_guess(capsys):
    assert usage_error(capsys, "--frobnicate") == "gputop: unknown option --frobnicate (see gputop --help)"


def test_a_bare_number_is_taken_for_a_pid(capsys):
    assert usage_error(capsys, "1234") == "gputop: 1234 is not a command: did you mean gputop --pid 1234?"


def test_a_mistyped_command_is_named_with_the_nearest_command(capsys):
    assert usage_error(capsys, "doctr") == "gputop: unknown command doctr: did you mean gputop doctor?"


def test_abbreviations_argparse_accepts_are_not_called_unknown(capsys):
    # --dur is --duration to argparse: its error is about the missing value, not an unknown option
    line = usage_error(capsys, "--pid", "1", "--dur")
    assert "unknown option" not in line and "--duration" in line
