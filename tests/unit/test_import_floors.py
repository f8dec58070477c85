"""No import runs back up a floor (issue 38): probes/ is built in floors, each importing only its own and those
below, so a change to how frames are folded (monitoring) never reaches the sensors, and the front ends read a run
through probes/view. The floors, lowest first, are FLOORS; docs/architecture.md says what each holds.

Two imports still run up (sensors and models read a process's /proc files through probes/sensors/process_facts.py,
which belongs with the sensors): they are named in STILL_UP so that any new one fails here."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Lowest first. A module's floor is that of its package under probes/ (probes/diagnosis/rules/gpu.py: "diagnosis"),
# or its own name for a module at probes/'s top.
FLOORS: tuple[frozenset[str], ...] = (
    frozenset({"probes", "frame", "machine_records", "lazy_door", "recent", "redact", "lru", "gpu_metrics",
               "stack_identity"}),
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


# What tui/ may import of probes/ beyond probes.view (the door to a run's view and to what the panes compute from it,
# probes/view/panes.py): the package itself (its version), the frozen dataclasses every part passes on (frame),
# the doors of the packages the front ends start or read (monitoring, outputs, reference, models: each package's
# __init__ re-exports the names they use, from its own modules and the floors below it), and the two commands'
# engines (compare, doctor). A name a front end newly needs goes into one of these doors, not into tui/ as a new
# module to import (docs/architecture.md, "The tree").
FRONT_END_DOORS = frozenset({
    "probes",
    "probes.frame",
    "probes.monitoring",
    "probes.outputs",
    "probes.reference",
    "probes.models",
    "probes.compare",
    "probes.doctor",
})


def test_the_front_ends_import_probes_through_its_doors():
    imported = {target for module, target in _imports()
                if module.startswith("tui") and target.split(".")[0] == "probes"
                and target != "probes.view" and not target.startswith("probes.view.")}
    assert imported <= FRONT_END_DOORS, sorted(imported - FRONT_END_DOORS)
    assert len(FRONT_END_DOORS) <= 8


LAZY_DOORS = ("probes.monitoring", "probes.outputs", "probes.reference")


def _typed_names(package: str) -> dict[str, str]:
    """What the door's `if TYPE_CHECKING:` block imports, name by name: where the type checker finds each."""
    path = REPO.joinpath(*package.split("."), "__init__.py")
    found = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module
                found |= {alias.asname or alias.name: statement.module for alias in statement.names}
    return found


def test_each_lazy_door_says_the_same_to_the_type_checker_and_at_run_time():
    """A lazy door names each of its names three times (the imports under TYPE_CHECKING, _HOMES, __all__): they
    agree, and each name, looked up, is its home's own object."""
    for package in LAZY_DOORS:
        door = importlib.import_module(package)
        assert _typed_names(package) == door._HOMES, package
        assert sorted(door.__all__) == sorted(door._HOMES), package
        for name, home in door._HOMES.items():
            assert getattr(door, name) is getattr(importlib.import_module(home), name), (package, name)
