"""The levers on the real H200 runs (tests/fixtures/h200), through `gputop replay --snapshot -` as a person runs it:
GPT-2 XL, compiled with a fused optimizer, is offered no lever it already pulls, and against the compiled probe's
step is told what its reference measured and what it does not try (issue 38); seed 004's A a larger micro-batch with
its basis (issue 30, item 3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.h200 import fixture, recording, remade_recording

pytestmark = pytest.mark.slow  # every test here runs the gputop command

REPO = Path(__file__).resolve().parents[2]
CHECKLIST = ("torch.compile", "scaled_dot_product_attention", "fused attention", "autocast", "TF32")


def replayed(path: Path, *options: str) -> dict:
    result = subprocess.run([sys.executable, "-m", "tui", "replay", str(path), "--snapshot", "-", *options],
                            capture_output=True, text=True, timeout=120, cwd="/",
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_gpt2xl_replayed_keeps_the_power_cap_and_against_its_probe_is_told_what_the_reference_measured(tmp_path):
    alone = replayed(remade_recording("gpt2xl_s2", tmp_path))["verdict"]
    advice = alone["advice_text"]
    assert len(advice) == 1 and advice[0].startswith("The power limit (700 W) caps the clock"), advice
    # The recording holds no board maximum (700 W is the H200 SXM's): no gain is claimed for raising the limit.
    assert "most it can win" not in advice[0]
    assert alone["advice"] == [{"text": advice[0], "lever": "power_cap", "gain": None}]
    verdict = replayed(remade_recording("gpt2xl_s2", tmp_path), "--baseline",
                       str(fixture("gpt2xl_probe_compile.json")))["verdict"]
    assert verdict["advice_text"][0].startswith("The step runs at 98% of this GPU's compiled reference step for its "
                                                "model (bf16, fused AdamW, SDPA, micro-batch 16)")
    assert "FP8, CUDA graphs" in verdict["advice_text"][0] and "bigger GPU" not in verdict["advice_text"][0]
    assert verdict["advice_text"][1].startswith("The power limit (700 W) caps the clock")
    assert not any(word in line for line in verdict["advice_text"] for word in CHECKLIST)
    assert not any("as expected for this model" in line for line in verdict["evidence"])


def test_seed004_a_replayed_is_offered_a_larger_micro_batch_with_its_basis(tmp_path):
    verdict = replayed(recording("seed004_a_rec", tmp_path))["verdict"]
    advice = verdict["advice_text"]
    assert len(advice) == 1 and advice[0].startswith("A larger micro-batch (9 of 140 GiB used, tensor active 31%)")
    assert "(a bound: NVML GPM's tensor and SM activity;" in advice[0]
    record = verdict["advice"][0]
    assert (record["lever"], record["gain"]["kind"]) == ("larger_micro_batch", "bound")
    assert record["gain"]["most"].startswith("less than the 63% of the SMs' active time")
    assert not any(word in line for line in advice for word in CHECKLIST)


def test_seed004_a_replayed_says_why_its_mfu_is_low_and_that_mfu_is_not_its_speed(tmp_path):
    """Seed 004's A (n_embd 384) ran at 30% MFU and trained 2.2x the tokens/s of B (n_embd 768, 39%): a person
    reading A alone must learn what holds its MFU down (tensor cores idle most of the SMs' active time) and that
    MFU is no measure of its speed per token."""
    evidence = replayed(recording("seed004_a_rec", tmp_path))["verdict"]["evidence"]
    mfu = next(i for i, line in enumerate(evidence) if "% MFU on the NVIDIA H200" in line)
    assert evidence[mfu].endswith(": the GPU is busy but far from its peak")
    assert evidence[mfu + 1].startswith("MFU counts FLOPs per second, not tokens: this job trains 1.0")
    assert "compare runs by tokens/s" in evidence[mfu + 1]
    inside = next(line for line in evidence if line.startswith("inside the GPU:"))
    assert "tensor active 31%" in inside and "matmuls too narrow to fill the tensor cores" in inside
