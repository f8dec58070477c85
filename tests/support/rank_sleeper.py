"""A training job to the census without torch's slow import: a real Python process whose environment names its
rank (RANK=0), sleeping, ready once it has touched a file (probes/jobs/follow.py counts such a process as a job).
And someone else's `python -m pytest`, waiting inside its one test: a Python process that is no training job."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SLEEPS = "import pathlib, sys, time\npathlib.Path(sys.argv[1]).touch()\nwhile True: time.sleep(0.05)"
WAITING_TEST = """import pathlib, time


def test_waits():
    pathlib.Path({started!r}).touch()
    while True:
        time.sleep(0.05)
"""


def clean_env() -> dict[str, str]:
    """This environment without the variables that would make a child a rank or a pytest worker."""
    dropped = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
    return {key: value for key, value in os.environ.items() if key not in dropped and not key.startswith("PYTEST_")}


def rank_sleeper_argv(started: Path) -> list[str]:
    """The command of the sleeping rank (run it with RANK=0 in its environment)."""
    return [sys.executable, "-c", SLEEPS, str(started)]


def start_rank_sleeper(started: Path) -> subprocess.Popen:
    return subprocess.Popen(rank_sleeper_argv(started), env=dict(clean_env(), RANK="0"), start_new_session=True)


def waiting_pytest_argv(folder: Path, started: Path) -> list[str]:
    """`python -m pytest` on one test in `folder` that touches `started` and waits: no config, no conftest of
    this repository (it runs from `folder`)."""
    test = folder / "test_waits.py"
    test.write_text(WAITING_TEST.format(started=str(started)))
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
            "--rootdir", str(folder), str(test)]
