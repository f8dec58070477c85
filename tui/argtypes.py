"""argparse types shared by every gputop subcommand, so each mistake reads the same everywhere."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def positive(convert: Callable[[str], float], kind: str) -> Callable[[str], float]:
    """An argparse type: `convert` the text, and insist the value is greater than 0 (NaN is not)."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
        return value

    return parse


positive_float = positive(float, "a number")
positive_int = positive(int, "a whole number")
