"""The `gputop` command's entry point: the parser built from tui.commands.COMMANDS, dispatch to the command
asked for, and exit statuses.

Bad input ends here with one line on stderr and exit status 2, never a traceback: argparse's own errors
through _Parser.error, a command's through UsageError. A mistyped option or command is named with the nearest
known one (`unknown option --pdi: did you mean --pid?`), and a bare number with `gputop --pid N`.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from probes import __version__
from tui.commands import COMMANDS
from tui.commands.shared import UsageError, silence_stdout
from tui.exitcodes import EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_USAGE

# How alike a mistyped word and a known one must be (difflib's ratio, the dashes counted) to be offered: --pdi and
# --pid are 0.8, --frobnicate and --rate 0.67.
_NEAR = 0.75


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) so scripts get a readable stderr, and it names
    what was mistyped: argparse alone reports `gputop --pdi 1234` as an invalid command '1234'."""

    _argv: tuple[str, ...] = ()  # what this parser was given, for error() to look through

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]  # typeshed: 2 overloads
                         namespace: Any = None) -> tuple[Any, list[str]]:
        self._argv = tuple(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"gputop: {self._explain(message)}\n")

    def _explain(self, message: str) -> str:
        """One line: an unknown option with the nearest known one, else a command that is none, else argparse's."""
        commands = self._commands()
        argv = list(self._argv)
        # The words after a command's name are that command's: its own options are the ones they may name.
        split = next((i for i, word in enumerate(argv) if word in commands), len(argv))
        for parser, words in ((self, argv[:split]), (commands.get(argv[split]) if split < len(argv) else None,
                                                     argv[split + 1:])):
            if isinstance(parser, _Parser):
                unknown = parser._unknown_option(words)
                if unknown is not None:
                    return unknown
        chosen = re.search(r"invalid choice: '([^']*)'", message)
        if commands and chosen is not None:
            word = chosen.group(1)
            if word.isdigit():
                return f"{word} is not a command: did you mean gputop --pid {word}?"
            near = difflib.get_close_matches(word, list(commands), n=1, cutoff=_NEAR)
            if near:
                return f"unknown command {word}: did you mean gputop {near[0]}?"
        return f"{message} (see {self.prog} --help)"

    def _unknown_option(self, words: Sequence[str]) -> str | None:
        """`unknown option --pdi: did you mean --pid?` for the first of `words` that is no option of this parser
        (nor the start of one, which argparse takes as that option); None when every option is known."""
        known = [option for action in self._actions if action.help != argparse.SUPPRESS
                 for option in action.option_strings]
        for word in words:
            if word == "--":  # what follows is no option
                break
            if not word.startswith("-") or word == "-" or re.fullmatch(r"-\d+(\.\d*)?|-\.\d+", word):
                continue
            name = word.split("=", 1)[0]
            if name in known or (name.startswith("--") and any(option.startswith(name) for option in known)):
                continue
            if not name.startswith("--") and name[:2] in known:  # -hX: a short option and its value
                continue
            near = difflib.get_close_matches(name, [option for option in known if option.startswith("--")], n=1,
                                             cutoff=_NEAR)
            return f"unknown option {name}: did you mean {near[0]}?" if near else \
                f"unknown option {name} (see {self.prog} --help)"
        return None

    def _commands(self) -> dict[str, argparse.ArgumentParser]:
        """The subcommands by name (gputop's own parser; none on a subcommand's)."""
        return {name: parser for action in self._actions if isinstance(action, argparse._SubParsersAction)
                for name, parser in action.choices.items()}


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
