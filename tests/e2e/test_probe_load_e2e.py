"""`gputop probe` on a busy machine says its figure is not a clean baseline (issue 20: torch measured 48x slower
beside other work, and the probe said nothing). The real probe (tiny model, CPU) beside two real busy processes; the
judgement itself on set figures, since this shared test machine is never quiet enough to show a clean run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.processes import wait_for

REPO = Path(__file__).resolve().parents[2]
pytest.importorskip("torch")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow
def test_probe_beside_two_busy_processes_says_it_is_not_a_clean_baseline(spawn_target):
    busy = [spawn_target("busy_loop.py", "--seconds", "600", stdout=subprocess.PIPE, ready=lambda p: True)
            for _ in range(2)]
    for process in busy:  # both are burning CPU before the probe starts (a state, not a guessed delay)
        wait_for(lambda pid=process.pid: _cpu_seconds(pid) >= 0.2, timeout=60)
    done = subprocess.run([sys.executable, "-m", "tui", "probe", "--model", "tiny", "--steps", "3", "--warmup", "1",
                           "--device", "cpu", "--json"], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr
    load = json.loads(done.stdout)["other_load"]
    assert load["clean"] is False, load
    # Before the probe, the two loops had the machine to themselves for a set interval. During its timed steps the
    # probe competes with them, and a few tiny steps span only a few of /proc's 10 ms ticks, so that figure swings
    # (0.45 in a CI-style run on a busy 2-core machine); the verdict rests on any of the three, as judge() does.
    assert load["others_cpus_before"] >= 0.5, load
    assert load["others_cpus_during"] is not None, load
    assert load["note"].startswith("not a clean baseline: other processes used")
    assert "not a clean baseline" in done.stderr  # said while it runs, not only in the JSON
    assert load["gpu_reason"] == "a CPU probe"
