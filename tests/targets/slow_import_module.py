"""Imported by slow_start.py: running this module takes $SLOW_IMPORT_SECONDS of Python on the CPU, the way a large
package's import does (torch's registers thousands of operators), so a sampler sees the main thread under
importlib's frames for that long."""

from __future__ import annotations

import os
import time


def register_operators(seconds: float) -> int:
    """Busy Python until `seconds` have passed: building tables, as an import does."""
    table: dict[int, int] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for key in range(1000):
            table[key] = table.get(key, 0) + key
    return len(table)


OPERATORS = register_operators(float(os.environ.get("SLOW_IMPORT_SECONDS", "6")))
