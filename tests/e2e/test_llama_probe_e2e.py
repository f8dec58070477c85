"""`gputop probe` at a Llama-shaped or mixture-of-experts model's shape: the modules
(probes/reference/llama_probe_model.py, probes/reference/moe_probe_model.py) have their family's parameter count, the
Llama one
computes what transformers' own models compute, a tiny config.json trains end to end through the CLI on the
CPU, ``--layers N`` scales and says so, and bad input is one line with exit 2."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from probes.models.hf_config import shape_from_config
from probes.models.llama import FAMILY, LlamaShape

REPO = Path(__file__).resolve().parents[2]
TINY_LLAMA = {  # two layers, grouped-query attention (4 query heads share 2 K/V heads), untied lm_head
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 32,
    "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
}
FAST = ("--device", "cpu", "--batch-size", "2", "--steps", "3", "--warmup", "1")


def write_config(tmp_path: Path, **changes) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY_LLAMA, **changes}), encoding="utf-8")
    return str(path)


TINY_MIXTRAL = {**TINY_LLAMA, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2}
TINY_QWEN2_MOE = {  # 4 routed experts of 32, top 2, and a shared expert of 64 behind its gate
    **TINY_LLAMA, "model_type": "qwen2_moe", "num_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64, "use_sliding_window": False,
}


def tiny(**changes) -> LlamaShape:
    return shape_from_config({**TINY_LLAMA, **changes}, "the test")


@pytest.mark.slow
def test_tiny_config_through_a_real_cli_process(tmp_path):
    config = write_config(tmp_path)
    done = subprocess.run([sys.executable, "-m", "tui", "probe", "--config", config, *FAST, "--json"],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    shape = tiny()
    assert (result["schema"], result["family"], result["model"]) == ("gputop.probe/1", "llama", config)
    assert result["shape"] == dataclasses.asdict(shape)
    assert result["params"] == result["params_with_position_embeddings"] == FAMILY.params(shape)
    assert result["flops_per_token"] == FAMILY.flops_per_token(shape)
    assert result["flops_formula"] == FAMILY.formula_with_values(shape)
    assert result["tokens_per_step"] == 2 * 32
    assert result["scaled_from_layers"] is None and result["scaling"] is None
    assert result["losses"][0] == pytest.approx(math.log(TINY_LLAMA["vocab_size"]), rel=0.05)  # untrained
    assert result["losses"][-1] < result["losses"][0]
    assert result["achieved_flops_per_s"] == pytest.approx(result["flops_per_token"] * result["tokens_per_s"])
    assert "gputop probe: timing 3 steps" in done.stderr
