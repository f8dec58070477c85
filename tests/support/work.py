"""How much Python a call runs, counted instead of timed: a count does not change with how busy the machine is
or with what earlier tests left running, so a test on it passes or fails the same way every time. What a call
costs in milliseconds is measured by benchmarks/diagnose_cost.py, not by a test."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any


def lines_run(call: Callable[[], Any]) -> int:
    """The number of Python lines (and function entries) executed while `call` runs, comprehensions included."""
    executed = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
        nonlocal executed
        executed += 1
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        call()
    finally:
        sys.settrace(previous)
    return executed
