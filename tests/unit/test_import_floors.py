"""No import runs back up a floor (issue 38): probes/ is built in floors, each importing only its own and those
below, so a change to how frames are folded (monitoring) never reaches the sensors, and the front ends read a run
through probes/view. The floors, lowest first, are FLOORS; docs/architecture.md says what each holds.

Two imports still run up (sensors and models read a process's /proc files through probes/sensors/process_facts.py,
which belongs with the sensors): they are named in STILL_UP so that any new one fails here."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Lowest first. A module's floor is that of its package under probes/ (probes/diagnosis/rules/gpu.py: "diagnosis"),
# or its own name for a module at probes/'s top.
FLOORS: tuple[frozenset[str], ...] = (
    frozenset({"probes", "frame", "recent", "redact", "lru", "gpu_metrics", "stack_identity"}),
    frozenset({"models", "logformats", "pace"}),
    frozenset({"sensors"}),
    frozenset({"jobs"}),
    frozenset({"sampling"}),
    frozenset({"diagnosis", "reference"}),
    frozenset({"doctor"}),
    frozenset({"view"}),
    frozenset({"outputs"}),
    frozenset({"monitoring"}),
    frozenset({"compare_inputs", "compare"}),
    frozenset({"tui"}),
)


def _part(module: str) -> str:
    parts = module.split(".")
    return "tui" if parts[0] == "tui" else parts[1] if len(parts) > 1 else parts[0]


def _floor(module: str) -> int:
    part = _part(module)
    return next(i for i, floor in enumerate(FLOORS) if part in floor)


def _imports() -> list[tuple[str, str]]:
    found = []
    for path in [*(REPO / "probes").rglob("*.py"), *(REPO / "tui").rglob("*.py")]:
        module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("probes", "tui"):
                found.append((module, node.module))
            elif isinstance(node, ast.Import):
                found += [(module, alias.name) for alias in node.names if alias.name.split(".")[0] in ("probes", "tui")]
    return found


def test_every_part_of_probes_has_a_floor():
    parts = {_part(module) for pair in _imports() for module in pair}
    assert parts <= set().union(*FLOORS), parts - set().union(*FLOORS)


def test_no_import_runs_back_up_a_floor():
    up = sorted((module, imported) for module, imported in _imports() if _floor(imported) > _floor(module))
    assert up == [], up
