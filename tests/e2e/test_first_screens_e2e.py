"""What a new user reads first, end to end (issue 31): the real command against real targets.

- A headless run (`gputop --pid P --snapshot out.json --duration N`, and with `--snapshot -`) against a real
  DataLoader-starved loop: stderr read line by line ends with the verdict in the TUI's words, the same verdict as
  the snapshot's, and on a machine without NVML says so in one short line.
- The TUI in tmux on a real lock-order deadlock (its stuck place names no bottleneck): the verdict pane's first
  line reads "HUNG · no progress seen for …", never "no verdict yet", at 80×24 and 160×48.

The screens' pure parts and the picker are tests/unit/test_first_screens.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from support.cli import gputop, ready
from support.tmux import TMUX_MARKS, Tmux
from support.verdict_line import check_verdict_line

from probes.sensors.nvml import NO_GPU_SHORT_REASONS

pytestmark = pytest.mark.slow
HEADLESS_TIMEOUT_S = 120  # a 5 s run, with py-spy's start and the imports, on a busy 2-core machine


def check_stderr(stderr: str, snapshot: dict) -> None:
    lines = stderr.splitlines()
    assert lines and all(line.startswith("gputop: ") for line in lines), stderr
    assert "Traceback" not in stderr
    check_verdict_line(lines[-1], snapshot)
    assert sum(1 for line in lines if line.startswith("gputop: verdict: ")) == 1
    gpus = snapshot["gpus"]
    short = NO_GPU_SHORT_REASONS.get(gpus.get("reason") or "") if not gpus.get("available") else None
    if short is not None:  # no GPU on this machine: one short line, nothing more about NVML
        nvml = [line for line in lines if "NVML" in line or "nvml" in line]
        assert nvml == [f"gputop: no NVIDIA GPU here (NVML: {short}): GPU readings and GPU rules are off"], stderr
        assert len(nvml[0]) <= 100


def test_a_headless_run_ends_with_its_verdict_on_stderr(spawn_target, tmp_path):
    target = spawn_target("diag_dataloader.py", "--seconds", "600", stdout=subprocess.PIPE, ready=ready,
                          timeout=120)
    out = tmp_path / "out.json"
    done = gputop("--pid", str(target.pid), "--snapshot", str(out), "--duration", "5", timeout=HEADLESS_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    snapshot = json.loads(out.read_text())
    assert f"gputop: snapshot of PID {target.pid} written to {out}" in done.stderr.splitlines()
    check_stderr(done.stderr, snapshot)
    print(done.stderr)

    # The JSON to stdout: the verdict still goes to stderr, last, and stdout stays one JSON document.
    piped = gputop("--pid", str(target.pid), "--snapshot", "-", "--duration", "5", timeout=HEADLESS_TIMEOUT_S)
    assert piped.returncode == 0, piped.stderr
    check_stderr(piped.stderr, json.loads(piped.stdout))
    assert "verdict:" not in piped.stdout.split("\n", 1)[0]


@pytest.fixture
def tmux(request):
    session = Tmux(request.node.name)
    yield session
    session.kill()


def with_tmux_marks(test):
    """The marks every tmux test carries (slow; skipped where tmux or py-spy is missing)."""
    for mark in TMUX_MARKS:
        test = mark(test)
    return test


@with_tmux_marks
def test_a_hung_job_with_no_bottleneck_named_reads_as_a_verdict_in_the_tui(spawn_target, tmux):
    target = spawn_target("diag_deadlock.py", stdout=subprocess.PIPE, ready=ready, timeout=60)
    tmux.start(f"{sys.executable} -m tui --pid {target.pid}", 80, 24)
    screen = tmux.wait_for(lambda s: "HUNG" in s and "no progress seen for" in s, 90, "the hung verdict")
    header = next(line for line in screen.splitlines() if "HUNG" in line)
    assert re.fullmatch(r"\s*HUNG\s+no progress seen for \d+ s\s*", header), header
    assert "no verdict yet" not in screen, screen
    tmux.run("resize-window", "-x", "160", "-y", "48")
    screen = tmux.wait_for(lambda s: "HUNG" in s and max(len(line) for line in s.splitlines()) > 80, 15,
                           "the hung verdict at 160x48")
    assert "no verdict yet" not in screen and "stuck at" in screen, screen
    tmux.keys("q")
    assert "GPUTOP_EXIT=0" in tmux.wait_for(lambda s: "GPUTOP_EXIT=" in s, 15, "gputop exiting")
