"""`gputop demo`: start the bundled training process and watch it in the live TUI (tui/demo.py owns the
process: starting it in its own session and stopping it, whatever the way out).
"""

from __future__ import annotations

import argparse

from tui.commands.shared import add_interval_argument


class DemoCommand:
    name = "demo"
    help = "start a bundled training process and watch it in the TUI"
    description = None

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        add_interval_argument(parser)

    def run(self, args: argparse.Namespace) -> int:
        from tui.demo import run_demo

        return run_demo(interval_s=args.interval)
