"""The `gputop` command's entry point: the parser built from tui.commands.COMMANDS, dispatch to the command
asked for, and exit statuses.

Bad input ends here with one line on stderr and exit status 2, never a traceback: argparse's own errors
through _Parser.error, a command's through UsageError.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from probes import __version__
from tui.commands import COMMANDS
from tui.commands.shared import UsageError, silence_stdout
from tui.exitcodes import EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_USAGE


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) so scripts get a readable stderr."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"gputop: {message} (see gputop --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """gputop's parser: the default command's options on gputop itself, every other command a subcommand."""
    (default,) = [command for command in COMMANDS if command.name is None]
    parser = _Parser(
        prog="gputop",
        description=default.help,
        epilog="Examples: gputop demo | gputop --pid 1234 | gputop --pid 1234 --snapshot out.json --duration 10"
               " | gputop serve --pid 1234 | gputop replay run.jsonl | gputop probe --model gpt2"
               " | gputop mfu --model gpt2-xl ...",
    )
    parser.add_argument("--version", action="version", version=f"gputop {__version__}")
    default.prepare_parser(parser)
    parser.set_defaults(command=default)
    subcommands = parser.add_subparsers(metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS:
        if command.name is None:  # the default command: its options are on gputop's own parser, above
            continue
        subparser = subcommands.add_parser(command.name, help=command.help, description=command.description)
        command.prepare_parser(subparser)
        subparser.set_defaults(command=command)  # a subcommand's defaults override gputop's own
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    """Parse `argv`, run the command it names and return its exit status."""
    args = build_parser().parse_args(argv)
    try:
        status = args.command.run(args)
        sys.stdout.flush()  # here, where a closed pipe is caught, not in the interpreter's exit
        return status
    except UsageError as exc:
        print(f"gputop: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        silence_stdout()  # the reader stopped reading (`gputop mfu | head -1`): not a failure to report
        return EXIT_INCOMPLETE


def main(argv: Sequence[str] | None = None) -> None:
    sys.exit(run(argv))
