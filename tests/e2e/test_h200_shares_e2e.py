"""Waiting on the GPU is not idle (issue 29, item 4), on the real H200 runs of tests/fixtures/h200/: in a GPU-bound
nanoGPT step the main thread spends much of its time blocked in a CUDA synchronisation (backward's tail,
`loss.item()`) with the GIL released, which py-spy reports as idle. The time shares, the TUI's shares line and
`gputop compare` must call that time waiting for the GPU, and never list it as an idle share that changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.h200 import recording

REPO = Path(__file__).resolve().parents[2]


def _replay_snapshot(path: Path) -> dict:
    result = subprocess.run([sys.executable, "-m", "tui", "replay", str(path), "--snapshot", "-"], cwd=REPO,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.slow
def test_the_gpt2xl_steady_state_shares_name_waiting_for_the_gpu_not_idle(tmp_path):
    # gpt2xl_s2: 40 s at steady state, GPU util 100%, the main thread idle in _engine_run_backward 45% of its samples.
    snapshot = _replay_snapshot(recording("gpt2xl_s2", tmp_path))
    shares = snapshot["time_shares"]
    assert "idle" not in shares, shares
    assert shares["gpu_wait"] > 0.3 and shares["compute"] > 0.3, shares
    assert sum(shares.values()) == pytest.approx(1.0, abs=0.01)
    assert snapshot["time_shares_gpu_wait_util_pct"] == 50.0  # marks idle as already told from waits on the GPU
    assert "idle" not in json.dumps(snapshot["verdict"])


@pytest.mark.slow
def test_a_compiled_gpu_bound_run_is_not_advised_to_torch_compile(tmp_path):
    # seed004_a_rec: nanoGPT compiled; its main thread runs Inductor's generated code
    # (/tmp/torchinductor_root/he/ches4dgb….py) and Triton's launchers. The live run advised "torch.compile".
    snapshot = _replay_snapshot(recording("seed004_a_rec", tmp_path))
    assert snapshot["verdict"]["bottleneck"] == "gpu_bound"
    advice = "\n".join(snapshot["verdict"]["advice_text"])
    assert "torch.compile" not in advice, advice
