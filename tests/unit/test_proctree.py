"""The process-tree probe against real processes: a family with a grandchild, torch DataLoaders in the
fork and forkserver contexts, a target that exits, and the PID aliases NVML matching relies on."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from probes.sensors.proc_readers import python_version
from probes.sensors.proctree import ProcessTreeProbe, target_exists


@pytest.fixture
def family(spawn_target, tmp_path):
    """(target Popen, {"busy": pid, "idle": pid, "grandchild": pid, "compile_worker": pid})."""
    ready_file = tmp_path / "pids.json"
    proc = spawn_target("proctree_family.py", str(ready_file), ready=lambda _: ready_file.exists())
    return proc, json.loads(ready_file.read_text())


def test_missing_pid_never_raises():
    assert not target_exists(2**22 + 7)
    probe = ProcessTreeProbe(2**22 + 7)
    info, samples = probe.read()
    assert not info.alive and samples == () and info.exit_reason
    assert probe.pid_aliases() == {}


@pytest.mark.parametrize(
    ("exe", "expected"),
    [
        ("/root/.pyenv/versions/3.11.7/bin/python3.11", "3.11.7"),
        ("/home/u/.local/share/uv/python/cpython-3.12.4-linux-x86_64-gnu/bin/python3.12", "3.12.4"),
        ("/opt/conda/bin/python3.10", "3.10"),
        ("/opt/tools-1.2.3/bin/python3.11", "3.11"),  # a version-like path that is not Python's
    ],
)
def test_python_version_from_the_interpreter_path(exe, expected):
    assert python_version(exe, pid=os.getpid()) == expected


FREEZER = Path("/sys/fs/cgroup/freezer")
