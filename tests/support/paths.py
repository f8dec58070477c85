"""Where the repository and the tests' target scripts are."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
TARGETS = REPO / "tests" / "targets"
