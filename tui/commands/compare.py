"""`gputop compare A B`: two runs side by side (snapshots, recordings or training logs) with what made the
difference, as plain text, `--json` or a TUI view (`--tui`). The reading and the comparing are probes/compare.py's;
this module owns the options and the output. Textual is imported only for `--tui` (tui/compare_app.py)."""

from __future__ import annotations

import argparse
import json
import sys

from tui.commands.shared import UsageError
from tui.exitcodes import EXIT_OK


class CompareCommand:
    name = "compare"
    help = "two runs side by side (snapshots, recordings or logs) and what made the difference"
    description = (
        "A and B are each a snapshot (.json, --snapshot), a recording (.jsonl, --record) or a training log. Shows "
        "pace, tokens/s, MFU, FLOPs per token, the verdict, GPU clocks and power, the main thread's time shares "
        "and the settings that differ (read from nanoGPT's log header or command line, or given with "
        "--config-a/--config-b), then says in words what made the difference.")

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("a", metavar="A", help="the first run: snapshot .json, recording .jsonl or a log")
        parser.add_argument("b", metavar="B", help="the second run, compared with A")
        parser.add_argument("--label", metavar="A,B", help="names for the two runs (default: A,B)")
        parser.add_argument("--tokens-per-iter", metavar="A,B",
                            help="tokens each run trains per iteration (524288,524288), where its input does not say")
        parser.add_argument("--config-a", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                            help="A's settings (batch_size=16 n_embd=384 ...), over what its input says")
        parser.add_argument("--config-b", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                            help="B's settings, as --config-a")
        output = parser.add_mutually_exclusive_group()
        output.add_argument("--json", action="store_true", help="print the comparison as JSON")
        output.add_argument("--tui", action="store_true",
                            help="show the comparison in the terminal UI: a table to scroll, q quits")

    def run(self, args: argparse.Namespace) -> int:
        from probes.compare import CompareError, compare_runs, load_run, parse_settings, render_text, to_json

        labels = _pair(args.label, "--label", str) if args.label else ("A", "B")
        tokens = (_pair(args.tokens_per_iter, "--tokens-per-iter", _positive_int) if args.tokens_per_iter
                  else (None, None))
        try:
            runs = [load_run(path, label, tokens_per_iter=count, config=parse_settings(settings))
                    for path, label, count, settings in zip((args.a, args.b), labels, tokens,
                                                            (args.config_a, args.config_b), strict=True)]
        except CompareError as exc:
            raise UsageError(str(exc)) from None
        comparison = compare_runs(*runs)
        if args.tui:
            from tui.compare_app import make_compare_app

            make_compare_app(comparison).run()
        elif args.json:
            json.dump(to_json(comparison), sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            sys.stdout.write(render_text(comparison))
        return EXIT_OK


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _pair(text: str, flag: str, convert) -> tuple:
    parts = text.split(",")
    if len(parts) != 2 or not all(part.strip() for part in parts):
        raise UsageError(f"{flag} takes two values, A's and B's, separated by a comma (got {text!r})")
    try:
        return tuple(convert(part.strip()) for part in parts)
    except ValueError:
        raise UsageError(f"{flag}: {text!r} is not two positive whole numbers (A,B)") from None
