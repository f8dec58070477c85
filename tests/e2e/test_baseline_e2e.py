"""probes.reference.baseline: the observed pace against the probe's reference step and the corrected MFU (the DESIGN.md
case), baseline files that are not one, GPU names for `gputop mfu`, and a live nanoGPT-format target."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.nanogpt_case import (
    CASE_TOKENS,
    xl_probe_on_h200,
)

from probes.models import PRESETS
from probes.models.gpt2 import flops_per_token
from probes.reference.baseline import (
    load_baseline,
)

REPO = Path(__file__).resolve().parents[2]
def write_json(path: Path, document) -> str:
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)


def gputop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tui", *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))


def assert_one_line_usage_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert all(needle in lines[0] for needle in needles), lines[0]


# --- baseline files ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_bad_baseline_file_exits_2_before_attaching(tmp_path):
    me = str(os.getpid())  # a live PID, so only the baseline can be what is wrong
    not_json = tmp_path / "notes.json"
    not_json.write_text("step 1 took 3 s\n")
    # Each asks for 120 s of sampling: one that attached before checking its baseline would outlast gputop()'s
    # 60 s timeout and fail here, however slowly this machine starts Python.
    assert_one_line_usage_error(gputop("--pid", me, "--baseline", str(tmp_path / "none.json"), "--snapshot", "-",
                                       "--duration", "120"), "cannot read the baseline", "none.json")
    assert_one_line_usage_error(gputop("--pid", me, "--baseline", str(not_json), "--duration", "120"),
                                "is not JSON")
    xl = write_json(tmp_path / "xl.json", dataclasses.asdict(xl_probe_on_h200()))
    assert_one_line_usage_error(gputop("--pid", me, "--baseline", xl, "--model", "gpt2", "--duration", "120"),
                                "--model gpt2", "is not the model the baseline")


# --- GPU names for `gputop mfu` --------------------------------------------------------------------------


MFU_CASE = ["mfu", "--model", "gpt2-xl", "--tokens-per-iter", str(CASE_TOKENS), "--iter-time", "21"]


# --- a live nanoGPT-format target --------------------------------------------------------------------------


@pytest.mark.slow
def test_live_target_observed_pace_in_the_snapshot(spawn_target, tmp_path):
    log = tmp_path / "train.log"
    with log.open("w") as stdout:
        target = spawn_target("nanogpt_like.py", "--interval", "0.3", stdout=stdout, stderr=stdout)
    baseline = tmp_path / "tiny.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # The probe runs while the first snapshot samples, to keep the test short.
    with baseline.open("w") as out:
        probe = subprocess.Popen([sys.executable, "-m", "tui", "probe", "--model", "tiny", "--device", "cpu",
                                  "--steps", "3", "--json"], stdout=out, stderr=subprocess.DEVNULL, cwd=REPO, env=env)
    try:
        plain = gputop("--pid", str(target.pid), "--snapshot", "-", "--duration", "4", "--tokens-per-iter", "1024")
        assert probe.wait(timeout=120) == 0
    finally:
        probe.kill()
        probe.wait()
    assert plain.returncode == 0, plain.stderr
    progress = json.loads(plain.stdout)["progress"]
    assert progress["source"] == str(log) and progress["format"] == "nanogpt"
    assert progress["seconds_per_iter"] == pytest.approx(0.3, abs=0.15)
    assert progress["tokens_per_s"] == pytest.approx(1024 / progress["seconds_per_iter"])
    assert progress["baseline"] is None

    compared = gputop("--pid", str(target.pid), "--snapshot", "-", "--duration", "4", "--tokens-per-iter", "1024",
                      "--baseline", str(baseline))
    assert compared.returncode == 0, compared.stderr
    progress = json.loads(compared.stdout)["progress"]
    observed = progress["seconds_per_iter"]
    assert observed == pytest.approx(0.3, abs=0.15)
    result = progress["baseline"]
    probe_result = json.loads(baseline.read_text())
    assert result["baseline_path"] == str(baseline)
    assert result["observed_seconds_per_iter"] == observed
    assert result["observed_tokens_per_s"] == pytest.approx(1024 / observed)
    # 1024 tokens per iteration = 2 micro-steps of the probe's 8 × 64
    assert result["reference_grad_accum"] == 2
    assert result["reference_seconds_per_iter"] == pytest.approx(
        2 * probe_result["fwd_bwd_seconds"] + probe_result["optimizer_seconds"])
    assert result["compute_bound_pct"] == pytest.approx(100 * result["reference_seconds_per_iter"] / observed)
    assert result["flops_per_token"] == flops_per_token(PRESETS["tiny"])
    assert result["corrected_mfu_pct"] is None  # a CPU baseline and no GPU: no peak to divide by
    assert result["reported_mfu_pct"] == 42.0
    assert result["lines"] and result["lines"][0].startswith(f"observed {observed:.3g} s/iter; reference ")
    loaded = load_baseline(str(baseline))
    assert loaded.shape == PRESETS["tiny"] and loaded.losses == tuple(probe_result["losses"])
