"""probes.reference.gpt_probe and `gputop probe`: the reference GPT trains on the CPU (tiny preset), reports what it
measured, fails cleanly on bad input, out-of-memory and a missing torch, and keeps torch out of imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from probes.models import PRESETS

REPO = Path(__file__).resolve().parents[2]
TINY = PRESETS["tiny"]
CLI = "import sys; from tui.cli import main; main(sys.argv[1:])"


def run_cli_process(*argv: str, prelude: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", prelude + CLI, *argv], capture_output=True, text=True,
                          timeout=90, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), check=False)


@pytest.mark.slow
def test_probe_json_through_a_real_process():
    done = run_cli_process("probe", "--model", "tiny", "--steps", "3", "--warmup", "1", "--device", "cpu",
                           "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["schema"] == "gputop.probe/1"
    for key in ("device_name", "peak_flops_per_s", "peak_source", "flops_per_token", "flops_formula",
                "step_seconds", "tokens_per_s", "achieved_flops_per_s", "mfu", "peak_memory_bytes",
                "iter_seconds", "first_step_seconds", "compile_seconds", "losses"):
        assert key in result
    assert result["shape"]["n_layer"] == TINY.n_layer
    assert len(result["losses"]) == 4 and result["losses"][-1] < result["losses"][0]
    assert result["mfu"] is None and "--peak-tflops" in result["peak_source"]
    assert "gputop probe: timing 3 steps" in done.stderr  # progress goes to stderr, JSON alone on stdout


@pytest.mark.slow
def test_probe_without_torch_says_one_line():
    done = run_cli_process("probe", "--model", "tiny", prelude="import sys; sys.modules['torch'] = None; ")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == "gputop: the probe needs torch: pip install 'gputop[probe]'\n"


@pytest.mark.slow
def test_imports_pull_in_neither_torch_nor_textual():
    check = ("import sys; import tui.cli, probes.reference.gpt_probe, probes.sensors.progress, probes.models.peaks, "
             "probes.models.gpt2, probes.models.mfu; bad = [m for m in ('torch', 'textual') if m in sys.modules]; "
             "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
