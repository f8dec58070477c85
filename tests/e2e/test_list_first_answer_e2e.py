"""`gputop --list` answers from one census reading (issue 37: it took 5.1 s, two readings 0.5 s apart for a CPU%
column, before printing anything).

The real command, run by a small driver that counts the census's readings (JobCensus.scan) and notes how many had
been taken when the first character reached stdout: work counted, not seconds timed (the figures are
benchmarks/list_latency.py's, in docs/benchmarks.md). The job is a real Python process whose environment names its
rank (RANK=0), which the census counts as a training job without torch's slow import (tests/support/rank_sleeper.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.paths import REPO
from support.processes import stop_process_tree, wait_for
from support.rank_sleeper import start_rank_sleeper

from tui.exitcodes import EXIT_OK

# gputop's own command line, with JobCensus.scan counted and stdout's first write noted; the counts go to stderr.
COUNTING_GPUTOP = """
import sys
from probes.jobs import census

readings = []
at_first_output = []
scan = census.JobCensus.scan


def counted(self):
    readings.append(1)
    return scan(self)


census.JobCensus.scan = counted


class NotingStdout:
    def __init__(self, out):
        self._out = out

    def write(self, text):
        if text and not at_first_output:
            at_first_output.append(len(readings))
        return self._out.write(text)

    def __getattr__(self, name):
        return getattr(self._out, name)


sys.stdout = NotingStdout(sys.stdout)
from tui.cli import run

status = run(sys.argv[1:])
sys.stdout.flush()
print(f"COUNTED readings before the first output: {at_first_output[0] if at_first_output else None}, "
      f"in all: {len(readings)}", file=sys.stderr)
sys.exit(status)
"""


def counted_gputop(*args: str) -> tuple[subprocess.CompletedProcess, int | None, int]:
    """The real command without a terminal; its exit, the readings taken before its first output and in all."""
    result = subprocess.run([sys.executable, "-c", COUNTING_GPUTOP, *args], capture_output=True, text=True,
                            timeout=120, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                            stdin=subprocess.DEVNULL, check=False)
    line = next(line for line in result.stderr.splitlines() if line.startswith("COUNTED "))
    before, total = line.removeprefix("COUNTED readings before the first output: ").split(", in all: ")
    return result, None if before == "None" else int(before), int(total)


@pytest.fixture
def ranked_process(tmp_path):
    """A Python process with RANK=0 in its environment, sleeping: a training job to the census."""
    started = tmp_path / "started"
    proc = start_rank_sleeper(started)
    try:
        wait_for(started.exists, timeout=60)
        yield proc
    finally:
        stop_process_tree(proc)


@pytest.mark.parametrize("args", [["--list"], ["--list", "--json"], []], ids=["list", "json", "no-terminal"])
def test_the_list_is_printed_from_one_reading_without_the_cpu_column(ranked_process, args):
    result, before_output, in_all = counted_gputop(*args)
    assert result.returncode == EXIT_OK, result.stderr
    assert "Traceback" not in result.stderr
    # One reading, and the list printed from it: no second reading a window later for a CPU%.
    assert (before_output, in_all) == (1, 1), result.stderr
    if args == ["--list", "--json"]:
        (job,) = [job for job in json.loads(result.stdout)["jobs"] if job["root_pid"] == ranked_process.pid]
        assert job["found_by"] == "RANK=0 in its environment"
        assert job["cpu_pct"] is None  # a rate needs two readings: not measured, rather than waited for
        assert job["age_s"] is not None and job["age_s"] >= 0
    else:
        header, *rows = result.stdout.splitlines()
        assert header.split() == ["PID", "JOB", "GPU", "AGE", "COMMAND"]
        assert any(row.split()[0] == str(ranked_process.pid) for row in rows), result.stdout

