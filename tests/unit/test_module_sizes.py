"""The size limits of the house: no module of probes/ or tui/ over 700 lines and no class over 400, so a newcomer
can read one part at a time. A module that grows past them is split by concern (docs/architecture.md's tree)."""

from __future__ import annotations

import ast

from support.paths import REPO

MODULE_LINES = 700
CLASS_LINES = 400


def sources():
    for package in ("probes", "tui"):
        yield from sorted((REPO / package).rglob("*.py"))


def test_no_module_is_over_the_limit():
    too_long = {str(path.relative_to(REPO)): lines for path in sources()
                if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MODULE_LINES}
    assert too_long == {}, f"over {MODULE_LINES} lines: split by concern"


def test_no_class_is_over_the_limit():
    too_long = {}
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None \
                    and node.end_lineno - node.lineno + 1 > CLASS_LINES:
                too_long[f"{path.relative_to(REPO)}:{node.name}"] = node.end_lineno - node.lineno + 1
    assert too_long == {}, f"classes over {CLASS_LINES} lines: split by concern"
