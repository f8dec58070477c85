"""`gputop compare A B --tui` (tui/compare_app.py): the table holds both runs and the verdict of the comparison
compare_runs built, `?` lists the keys, `q` quits; SVG snapshots at 80x24 and 160x48 of two fixture recordings
(a data-bound run against a GPU-bound one), stored in tests/unit/__snapshots__/ as test_tui_snapshots.py's are; bad
input is one line and exit 2 before any screen; and (slow) the real command in a real terminal (tmux) on two real
recorded runs of the seed case scaled down (tests/fixtures/compare/)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.tmux import Tmux

from probes.compare import compare_runs, load_run

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
DATA_BOUND = FIXTURES / "recordings" / "data_bound.jsonl"
GPU_BOUND = FIXTURES / "frames" / "h200_gpu_bound.jsonl"
NARROW, WIDE = FIXTURES / "compare" / "narrow.jsonl", FIXTURES / "compare" / "wide.jsonl"
SIZES = {"80x24": (80, 24), "160x48": (160, 48)}


def comparison():
    # Paths relative to the repository, as a person types them, so the header (and the snapshot) does not
    # depend on where the checkout lives.
    return compare_runs(load_run(str(DATA_BOUND.relative_to(REPO)), "data-bound"),
                        load_run(str(GPU_BOUND.relative_to(REPO)), "gpu-bound"))


@pytest.fixture(autouse=True)
def _from_the_repository(monkeypatch):
    monkeypatch.chdir(REPO)


def gputop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tui", *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), check=False)


@pytest.mark.slow
@pytest.mark.parametrize(("args", "message"), [
    (["missing.jsonl", str(GPU_BOUND), "--tui"], "missing.jsonl: no such file"),
    ([str(DATA_BOUND), str(GPU_BOUND), "--tui", "--json"], "not allowed with argument --tui"),
])
def test_bad_input_says_one_line_before_any_screen_starts(args, message):
    done = gputop("compare", *args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert done.stdout == ""  # no screen was drawn


@pytest.fixture
def tmux(request):
    session = Tmux(request.node.name)
    yield session
    session.kill()  # the server and the gputop it runs


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux)")
def test_in_a_real_terminal_the_view_shows_the_runs_scrolls_helps_and_quits(tmux):
    """`gputop --pid` runs its TUI in whatever terminal it is given, and so does compare --tui: here in tmux."""
    tmux.start(f"{sys.executable} -m tui compare {NARROW.relative_to(REPO)} {WIDE.relative_to(REPO)} "
               "--label narrow,wide --tui", 100, 30)
    comparison = compare_runs(load_run(str(NARROW), "narrow"), load_run(str(WIDE), "wide"))
    screen = tmux.wait_for(lambda s: comparison.verdict[0][:60] in s and "FLOPs/token" in s, 30,
                           "the verdict and the table")
    assert "tests/fixtures/compare/narrow.jsonl (recording)" in screen
    assert "tests/fixtures/compare/wide.jsonl (recording)" in screen
    tmux.keys("?")
    tmux.wait_for(lambda s: "gputop keys" in s and "Move down" in s, 10, "the help screen")
    tmux.keys("Escape")
    tmux.wait_for(lambda s: "gputop keys" not in s, 10, "the help screen closing")
    tmux.keys("q")
    screen = tmux.wait_for(lambda s: "GPUTOP_EXIT=" in s, 15, "gputop exiting")
    assert "GPUTOP_EXIT=0" in screen and "Traceback" not in screen
    assert not tmux.alternate_screen_on()  # the terminal is restored
