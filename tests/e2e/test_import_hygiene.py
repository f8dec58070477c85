"""The engine stays headless: importing probes/ (and the headless CLI path) pulls in neither Textual nor torch.

Checked in a fresh interpreter, since this test process has both loaded by other tests.
"""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import probes

REPO = Path(__file__).resolve().parents[2]


def loaded_after(code: str) -> set[str]:
    script = code + "\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True)
    return set(out.stdout.split())


@pytest.mark.slow
def test_probes_never_import_textual_or_torch():
    # walk_packages, not iter_modules: the registries (probes/jobs/launchers/, probes/logformats/, ...) are
    # subpackages, and a module in one of them importing Textual must fail here too.
    names = [m.name for m in pkgutil.walk_packages(probes.__path__, "probes.")]
    assert "probes.monitoring.engine" in names
    modules = loaded_after("\n".join(f"import {n}" for n in names))
    assert not any(m == "textual" or m.startswith("textual.") for m in modules)
    assert "torch" not in modules


@pytest.mark.slow
def test_headless_cli_path_does_not_import_textual_or_torch():
    modules = loaded_after("import tui.cli; tui.cli.build_parser()\n"
                           "import probes.monitoring.engine, probes.outputs.snapshot")
    assert "textual" not in modules
    assert "torch" not in modules
