"""The tests' own house rules, read from their source: what the tests share lives in tests/support/ and no test
module imports another (a test module is for pytest to collect, and importing one runs it twice under two names);
helpers are imported one way, `support.<module>`; conftest.py is pytest's, never imported; and the fast layer is
kept apart from the end-to-end one by the slow mark (tests/conftest.py fails a fast test that starts a process).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support.processes import processes_started

TESTS = Path(__file__).resolve().parents[1]
# Python files that are neither test modules nor helpers: what a target process runs (tests/targets/, started as
# scripts) and the scripts that made a fixture (tests/fixtures/).
NOT_IMPORTED_BY_TESTS = ("targets", "fixtures")


@pytest.mark.slow
def test_every_way_of_starting_a_process_is_seen():
    """What conftest.py's check on the fast layer rests on: subprocess (run and Popen) and os.fork are all seen."""
    with processes_started() as started:
        subprocess.run(["true"], check=True)
        with subprocess.Popen(["true"]) as proc:
            proc.wait()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    assert started == ["true", "true", "os.fork()"]
