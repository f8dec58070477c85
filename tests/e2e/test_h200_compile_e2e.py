"""The first compile of a big model is a one-time warm-up, not a recompilation storm (issue 29, item 1), on the real
H200 runs of tests/fixtures/h200/ (its README says what each file is).

gpt2xl_s1 watched nanoGPT's GPT-2 XL from 35 s to 74 s after it started: `estimate_loss` had triggered the first
compile (the eval graph), the training graph came next, and no training step had run. Live, gputop called that "a
recompilation storm: compiling again in 12 of 14 sample windows after training steps had run", advised hunting
changing shapes, promised "up to 5.2× faster once compiling is done" and named compile a phase recurring "every
14 s": py-spy's stacks caught mid-change (a leaf frame of inductor or sympy, an empty stack) counted as training,
and the sampler's gaps split one long compile into episodes. gpt2xl_s2 is the same run at steady state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.h200 import recording

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gputop_replay_of_the_first_compile_says_warm_up_in_the_snapshot(tmp_path):
    result = subprocess.run([sys.executable, "-m", "tui", "replay", str(recording("gpt2xl_s1", tmp_path)),
                             "--snapshot", "-"], capture_output=True, text=True, timeout=120, cwd=REPO,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    verdict = document["verdict"]
    assert verdict["bottleneck"] == "compile_warmup"
    assert verdict["evidence"][0].startswith("torch.compile warm-up: compiling for 30 s so far"), verdict
    assert "storm" not in json.dumps(verdict) and verdict["max_speedup"] is None, verdict
    assert document["recurring_phases"] == [], document["recurring_phases"]
