"""docs/architecture.md names the files a contributor edits to add a launcher, format, family, rule or command:
each path it names must exist, so the map cannot drift from the tree unnoticed."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
# A repository path in backticks or a link: probes/jobs/launchers/base.py, tests/fixtures/logs/<name>.log, ...
_PATH = re.compile(r"(?:`|\()((?:probes|tui|tests|docs)/[\w./<>-]+?)(?:`|\)|\s)")


def named_paths() -> list[str]:
    return sorted(set(_PATH.findall(DOC.read_text())))


def test_the_map_names_the_registries():
    paths = named_paths()
    for registry in ("probes/jobs/launchers/__init__.py", "probes/logformats/__init__.py", "probes/models/__init__.py",
                     "probes/diagnosis/rules/__init__.py", "tui/commands/__init__.py"):
        assert registry in paths, f"docs/architecture.md does not say where {registry} is"


def test_every_path_the_map_names_exists():
    missing = []
    for path in named_paths():
        if "<" in path:  # a pattern such as tests/fixtures/logs/<name>.log: its folder must exist
            path = path[: path.index("<")].rstrip("/") or "."
        if not (REPO / path).exists():
            missing.append(path)
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"
