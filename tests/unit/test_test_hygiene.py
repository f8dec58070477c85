"""The tests' own house rules, read from their source: what the tests share lives in tests/support/ and no test
module imports another (a test module is for pytest to collect, and importing one runs it twice under two names);
helpers are imported one way, `support.<module>`; conftest.py is pytest's, never imported; and the fast layer is
kept apart from the end-to-end one by the slow mark (tests/conftest.py fails a fast test that starts a process).
"""

from __future__ import annotations

import ast
from pathlib import Path

from support.processes import processes_started

TESTS = Path(__file__).resolve().parents[1]
# Python files that are neither test modules nor helpers: what a target process runs (tests/targets/, started as
# scripts) and the scripts that made a fixture (tests/fixtures/).
NOT_IMPORTED_BY_TESTS = ("targets", "fixtures")


def sources_of_the_tests() -> list[Path]:
    """conftest.py, every test module (tests/**/test_*.py) and every helper in tests/support/."""
    found = [TESTS / "conftest.py", *TESTS.rglob("test_*.py"), *(TESTS / "support").rglob("*.py")]
    return sorted(path for path in set(found) if path.relative_to(TESTS).parts[0] not in NOT_IMPORTED_BY_TESTS)


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every module `path` imports, at any depth (`from a import b` gives a and a.b)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(TESTS.parent)}:{line}"


def test_no_test_module_or_helper_imports_a_test_module_or_conftest():
    wrong = [f"{where(path, line)} imports {name}" for path in sources_of_the_tests() for line, name in imports_of(path)
             if any(part.startswith("test_") or part == "conftest" for part in name.split("."))]
    assert not wrong, "put what tests share in tests/support/ and import it from there:\n" + "\n".join(wrong)


def test_helpers_are_imported_as_support_never_through_the_tests_folder():
    # `tests.support.x` beside `support.x` would be two copies of one module (two registries, two sets of fakes).
    wrong = [f"{where(path, line)} imports {name}" for path in sources_of_the_tests() for line, name in imports_of(path)
             if name == "tests" or name.startswith("tests.")]
    assert not wrong, "import helpers as `from support.<module> import ...`:\n" + "\n".join(wrong)


def test_every_python_file_directly_under_tests_is_a_test_module_or_conftest():
    strays = sorted(path.name for path in TESTS.glob("*.py")
                    if path.name != "conftest.py" and not path.name.startswith("test_"))
    assert not strays, f"helpers go in tests/support/: {strays}"


def test_support_is_a_package_of_helpers_and_holds_no_tests():
    support = TESTS / "support"
    assert (support / "__init__.py").is_file()
    tests_there = sorted(path.name for path in support.rglob("test_*.py"))
    assert not tests_there, f"tests/support/ is collected by nothing: move these to tests/: {tests_there}"
    for path in support.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        assert ast.get_docstring(tree), f"{path.relative_to(TESTS.parent)}: say in a docstring what it holds"
        assert not [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and node.name.startswith("test_")], f"{path.relative_to(TESTS.parent)} defines a test"


def test_what_the_fast_layer_sees_as_nothing_started():
    with processes_started() as started:
        assert sum(range(10)) == 45
    assert started == []
