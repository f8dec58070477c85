"""The gputop command run as a user runs it (`python -m tui ARGS` from the repository), and what every bad input
must give: one line on stderr and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys

from support.paths import REPO


def gputop(*args: str, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.update(kwargs.pop("env", {}))
    return subprocess.run([sys.executable, "-m", "tui", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=kwargs.pop("cwd", REPO), **kwargs)


def assert_one_line_usage_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0]


def ready(proc) -> bool:
    return proc.stdout.readline().strip() == b"ready"
