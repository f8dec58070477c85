"""The distribution as a user gets it: a wheel built from this checkout, installed into a clean virtual
environment, runs `gputop` from that environment (not from this checkout) with its stylesheets on board.

The venv sees the test environment's site-packages for the dependencies (textual, psutil, ...), after its own:
what is checked is our wheel (its name, its packages, its data files, its console script), not PyPI's copies
of the others.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from support.paths import REPO

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_the_wheel_installs_into_a_clean_venv_and_runs_gputop(tmp_path):
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(wheels), str(REPO)], capture_output=True, text=True, timeout=240,
                           cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("*.whl")
    assert wheel.name.startswith("gputop_train-"), wheel.name  # "gputop" on PyPI is someone else's tool
    names = zipfile.ZipFile(wheel).namelist()
    assert "tui/app.tcss" in names and "probes/__init__.py" in names
    assert not any(name.startswith("tests/") for name in names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    venv_site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    # The dependencies from the environment running this test, searched after the venv's own packages.
    Path(venv_site, "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                               capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stderr

    # Run from an empty folder, with nothing of this checkout on the path: only the installed wheel can answer.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run([str(python), "-c", "import tui, probes; print(tui.__file__); print(probes.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert where.returncode == 0, where.stderr
    assert all(Path(line).is_relative_to(venv) for line in where.stdout.split()), where.stdout
    version = subprocess.run([str(venv / "bin" / "gputop"), "--version"], capture_output=True, text=True, env=env,
                             cwd=tmp_path, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("gputop "), (version.stdout, version.stderr)
    mfu = subprocess.run([str(venv / "bin" / "gputop"), "mfu", "--model", "gpt2", "--tokens-per-iter", "524288",
                          "--iter-time", "3.9", "--gpu", "NVIDIA H100 80GB HBM3"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert mfu.returncode == 0 and "MFU" in mfu.stdout, (mfu.stdout, mfu.stderr)
