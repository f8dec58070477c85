"""No import cycle between the modules of probes/ and tui/: data flows one way (docs/architecture.md), and a
cycle is where it starts flowing both.

The graph is read from the source with ast, not by importing, so it sees every import a module holds: at its
top, under `if TYPE_CHECKING:`, and inside functions. An import deferred into a function (or kept for the type
checker) still makes the module depend on the other, and hiding a cycle that way is how the two this test was
written for went unnoticed (the view types in monitor.py that snapshot.py needed, the readers of a job's
command line that imported the module that called them). Imports deferred for their cost (Textual, torch) are
of packages outside probes/ and tui/ and never reach this graph.
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("probes", "tui")


@dataclass(frozen=True)
class Edge:
    """`source` imports `target` at `line` of its file."""

    source: str
    target: str
    path: str
    line: int


def module_files() -> dict[str, Path]:
    """Every module of PACKAGES by its dotted name (a package by its own name, not `.__init__`)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_modules(module: str, is_package: bool, node: ast.Import | ast.ImportFrom,
                     known: dict[str, Path]) -> list[str]:
    """The modules of `known` an import statement loads. `from package import submodule` depends on the
    submodule, not on the package: a package that imports its own submodules is no cycle."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in known]
    if node.level:  # relative: from the module's own package up
        base = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        source = f"{base}.{node.module}" if node.module else base
    else:
        source = node.module or ""
    submodules = [f"{source}.{alias.name}" for alias in node.names if f"{source}.{alias.name}" in known]
    names_from_source = len(submodules) < len(node.names)
    return [*((source,) if names_from_source and source in known else ()), *submodules]


def import_edges() -> dict[str, list[Edge]]:
    """For each module, what it imports of probes/ and tui/, wherever in the file the import sits."""
    known = module_files()
    graph: dict[str, list[Edge]] = {module: [] for module in known}
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        seen: set[str] = set()
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in imported_modules(module, path.name == "__init__.py", node, known):
                if target != module and target not in seen:
                    seen.add(target)
                    graph[module].append(Edge(module, target, str(path.relative_to(REPO)), node.lineno))
    return graph


def strongly_connected(graph: dict[str, list[Edge]]) -> list[list[str]]:
    """Tarjan's components of more than one module, iteratively (no recursion limit to meet)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in graph:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            module, next_edge = work.pop()
            if next_edge == 0:
                index[module] = low[module] = len(index)
                stack.append(module)
                on_stack.add(module)
            edges = graph[module]
            if next_edge < len(edges):
                work.append((module, next_edge + 1))
                target = edges[next_edge].target
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[module] = min(low[module], index[target])
                continue
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
            if work:  # back in the caller: carry the low link up
                caller = work[-1][0]
                low[caller] = min(low[caller], low[module])
    return components


def one_cycle(graph: dict[str, list[Edge]], component: list[str]) -> list[Edge]:
    """A shortest cycle through the component's first module, edge by edge."""
    members = set(component)
    start = component[0]
    came_by: dict[str, Edge] = {}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        for edge in graph[module]:
            if edge.target not in members or edge.target in came_by:
                continue
            came_by[edge.target] = edge
            if edge.target == start:
                path = [edge]
                while path[0].source != start:
                    path.insert(0, came_by[path[0].source])
                return path
            queue.append(edge.target)
    raise AssertionError(f"{component} is strongly connected but no cycle was found through {start}")


def describe(cycle: list[Edge]) -> str:
    return "\n".join(f"  {edge.source} imports {edge.target} ({edge.path}:{edge.line})" for edge in cycle)


def test_the_graph_sees_imports_of_each_kind():
    """A guard on the reader itself: a graph that missed a kind of import would find no cycle through it."""
    graph = import_edges()
    targets = {module: {edge.target for edge in edges} for module, edges in graph.items()}
    assert "probes.frame" in targets["probes.monitoring.engine"]  # at the top
    assert "probes.monitoring" in targets["tui.commands.attach"]  # inside a function
    assert "probes.models.peaks" in targets["probes.models.gpt2"]  # under TYPE_CHECKING
    assert "probes.models.gpt2" in targets["probes.models"]  # from a package, its submodule
    assert "probes.models" not in targets["probes.models.gpt2"]  # ... and not the package itself


def test_no_import_cycle_between_modules():
    graph = import_edges()
    cycles = [describe(one_cycle(graph, component)) for component in strongly_connected(graph)]
    assert not cycles, "import cycles (a module below another must not import it, not even lazily):\n" + \
        "\n\n".join(cycles)
