"""probes.models.gpt2 and probes.models.mfu, and `gputop mfu`: counts against hand-computed values and the
nanoGPT/H200 case end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from probes.models import PRESETS

REPO = Path(__file__).resolve().parents[2]
XL = PRESETS["gpt2-xl"]
CASE_ARGS = ["mfu", "--model", "gpt2-xl", "--tokens-per-iter", "1048576", "--iter-time", "21",
             "--gpu", "NVIDIA H200"]


@pytest.mark.slow
def test_mfu_through_the_gputop_command():
    """The H200 case through `python -m tui`, the installed command's entry point, in a process of its own."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "tui", *CASE_ARGS, "--nanogpt-mfu", "164"], capture_output=True,
                          text=True, timeout=60, cwd=REPO, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert "51.8%" in done.stdout and "511.7 TFLOP/s" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "tui", "mfu", "--model", "gpt2", "--iter-time", "-1"],
                         capture_output=True, text=True, timeout=60, cwd=REPO, env=env, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


@pytest.mark.slow
def test_a_reader_that_stops_early_gets_no_traceback():
    """`gputop mfu ... | head -1`: the reader is gone before gputop writes (the read end is closed at once, so the
    write always meets a broken pipe); gputop stops quietly, exit 1, nothing on stderr."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "tui", *CASE_ARGS, "--nanogpt-mfu", "164"], cwd=REPO, env=env,
                              stdout=write_end, stderr=subprocess.PIPE, timeout=60, check=False)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (1, b""), done.stderr.decode()
