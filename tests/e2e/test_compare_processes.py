"""gputop compare: probes/compare.py on constructed snapshots and logs (the seed case of issue 18: two nanoGPT
runs with the same tokens per iteration, the wider one slower per token though its MFU is higher), a recording
folded as replay folds it, and the command line (text, --json, bad input is one line and exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from probes.compare import compare_runs, load_run, to_json

REPO = Path(__file__).resolve().parents[2]
RECORDINGS = REPO / "tests" / "fixtures" / "recordings"


def nanogpt_snapshot(seconds_per_iter: float, mfu_pct: float, batch: int, accumulation: int, n_embd: int,
                     n_head: int, **extra) -> dict:
    """A snapshot of nanoGPT on a 12 GB card, its shape on its command line (configurator.py's --key=value)."""
    return {
        "schema": "gputop.snapshot/1",
        "target": {"pid": 4242, "cmdline": ["python", "train.py", "config/train_gpt2.py", f"--batch_size={batch}",
                                            f"--gradient_accumulation_steps={accumulation}", f"--n_embd={n_embd}",
                                            f"--n_head={n_head}", "--n_layer=12", "--block_size=1024"]},
        "progress": {"seconds_per_iter": seconds_per_iter, "reported_mfu_pct": mfu_pct, "tokens_per_s": None,
                     "baseline": None},
        "gpus": {"available": True, "devices": [{"name": "NVIDIA GeForce RTX 3060", "sm_clock_mhz": 1777,
                                                 "power_w": 168.0, "in_target": True}]},
        "verdict": {"bottleneck": "gpu_bound", "liveness": "progressing", "confidence": 0.9, "evidence": [],
                    "advice": []},
        **extra,
    }


@pytest.fixture
def seed_case(tmp_path):
    small, wide = tmp_path / "embd384.json", tmp_path / "embd768.json"
    small.write_text(json.dumps(nanogpt_snapshot(3.9, 12.9, 16, 32, 384, 6)))
    wide.write_text(json.dumps(nanogpt_snapshot(9.3, 15.4, 8, 64, 768, 12)))
    return small, wide


def gputop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tui", *args], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), check=False)


@pytest.mark.slow
def test_the_command_prints_the_comparison(seed_case):
    done = gputop("compare", *map(str, seed_case), "--label", "embd384,embd768")
    assert done.returncode == 0, done.stderr
    assert "embd768 is 2.4× slower per token than embd384" in done.stdout
    document = json.loads(gputop("compare", *map(str, seed_case), "--json").stdout)
    assert document["a"]["tokens_per_iter"] == document["b"]["tokens_per_iter"] == 524_288
    assert document["verdict"] == list(compare_runs(load_run(str(seed_case[0]), "A"),
                                                    load_run(str(seed_case[1]), "B")).verdict)
    assert to_json(compare_runs(load_run(str(seed_case[0]), "A"), load_run(str(seed_case[1]), "B"))) == document


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["missing.json", "{b}"], "missing.json: no such file"),
    (["{a}", "/"], "/: not a file"),
    (["{a}", "{b}", "--tokens-per-iter", "524288"], "--tokens-per-iter takes two values"),
    (["{a}", "{b}", "--tokens-per-iter", "1,x"], "not two positive whole numbers"),
    (["{a}", "{b}", "--config-a", "n_layer"], "expected KEY=VALUE"),
])
def test_bad_input_is_one_line_and_exit_2(seed_case, args, message):
    a, b = map(str, seed_case)
    done = gputop("compare", *(arg.format(a=a, b=b) for arg in args))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert done.stdout == ""
