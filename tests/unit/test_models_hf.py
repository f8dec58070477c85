"""The llama and moe families against the outside world: the config.json fixtures (written from the model
cards' published values) read to the presets, the FLOP count within 2% of Megatron-LM's
num_floating_point_operations written out here on its own, active parameters of the MoE models against
their cards, tiny transformers models built from a config with exactly the counted parameters, and
configs that cannot be counted refused in one line."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from probes.models import PRESETS, family_of
from probes.models.hf_config import ModelConfigError, load_config, shape_from_config
from probes.models.llama import LlamaShape
from probes.models.moe import MoeShape

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "configs"
MOE_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "models" / "moe.json"
COUNTABLE = sorted(path.stem for path in CONFIGS.glob("*.json") if path.stem != "deepseek-v3")


@pytest.mark.parametrize("name", COUNTABLE)
def test_each_config_reads_to_its_preset(name):
    assert load_config(str(CONFIGS / f"{name}.json")) == PRESETS[name]


def megatron_flops_per_token(shape: LlamaShape | MoeShape) -> float:
    """megatron/training/training.py num_floating_point_operations (transformer_flops), for batch × seq
    tokens divided by them: 3 (fwd, wgrad, dgrad) × 2 (FMA) × the GEMM sizes; attention causal."""
    d, kv_channels, t = shape.hidden_size, shape.head_dim, shape.seq_len
    query = kv_channels * shape.num_heads
    key = value = kv_channels * shape.num_kv_heads
    attention = 3 * 2 * (d * (query + key + value) + query * t / 2 * 2 + query * d)
    if isinstance(shape, MoeShape):
        mlp = 3 * 2 * d * (shape.expert_intermediate_size * shape.experts_per_token * 3
                           + shape.shared_expert_intermediate_size * 3)
    else:
        mlp = 3 * 2 * d * shape.intermediate_size * 3
    logits = 3 * 2 * d * shape.vocab_size
    return shape.num_layers * (attention + mlp) + logits


@pytest.mark.parametrize("name", ["llama-3-8b", "mistral-7b", "qwen2-7b", "gemma-7b", "mixtral-8x7b",
                                  "qwen1.5-moe-a2.7b", "qwen3-30b-a3b"])
@pytest.mark.parametrize("seq_len", [2048, 4096])
def test_flops_per_token_within_2_percent_of_megatron_plus_the_masked_half(name, seq_len):
    # Megatron-LM (since v0.12) counts the causal half of the score matrix, QKᵀ and softmax·V over T/2 keys:
    # 3·2·2·(H·Q)·T/2 per layer. gputop counts the whole matrix, so it is Megatron's count plus the other
    # half, 6·L·H·Q·T. Megatron has no sliding window: compare at lengths inside Mistral's 4096-token window.
    shape = dataclasses.replace(PRESETS[name], seq_len=seq_len)
    masked_half = 6 * shape.num_layers * shape.num_heads * shape.head_dim * seq_len
    ours = family_of(shape).flops_per_token(shape)
    assert ours == pytest.approx(megatron_flops_per_token(shape) + masked_half, rel=0.02)


def test_a_sliding_window_caps_the_attention_term():
    full = dataclasses.replace(PRESETS["mistral-7b"], sliding_window=None)
    windowed = PRESETS["mistral-7b"]  # seq 32768, window 4096: a query reaches 4096 keys, not 32768
    family = family_of(windowed)
    saved = family.flops_per_token(full) - family.flops_per_token(windowed)
    assert saved == 12 * 32 * 32 * 128 * (32768 - 4096)
    assert family.formula_with_values(windowed).endswith("12·32·32·128·4096 (T: the 4,096-token sliding window)")


def test_torchtitans_count_is_ours():
    # torchtitan get_dense_model_nparams_and_flops: 6·(params − embedding) + 6·l·h·(2·q)·t, head_dims the sum of
    # the q/k and v widths: 12·L·H·Q·T, the whole T×T matrix ("do not account for sparsity in causal attention").
    shape = PRESETS["llama-3-8b"]
    family = family_of(shape)
    torchtitan = 6 * (family.params(shape) - shape.vocab_size * shape.hidden_size) + 6 * 32 * 32 * (2 * 128) * 8192
    assert family.flops_per_token(shape) == torchtitan


def test_moe_active_parameters_match_the_model_cards():
    fixture = json.loads(MOE_FIXTURE.read_text(encoding="utf-8"))
    for name, published in fixture["presets"].items():
        shape = PRESETS[name]
        assert family_of(shape).active_params(shape) == published["active_params"], published["source"]
    mixtral = PRESETS["mixtral-8x7b"]
    assert round(family_of(mixtral).active_params(mixtral) / 1e9, 1) == 12.9


def test_a_tied_lm_head_is_counted_once_in_params_and_once_in_flops():
    gemma = PRESETS["gemma-7b"]
    untied = dataclasses.replace(gemma, tie_word_embeddings=False)
    family = family_of(gemma)
    assert family.params(untied) - family.params(gemma) == 256000 * 3072
    assert family.flops_per_token(untied) == family.flops_per_token(gemma)  # the logits are computed either way


TINY = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
            num_hidden_layers=2, vocab_size=128, max_position_embeddings=256, head_dim=16)
TINY_VARIANTS = {
    "llama": {},
    "mistral": {"sliding_window": 32},
    "qwen2": {},
    "qwen3": {},
    "gemma": {},
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                  "shared_expert_intermediate_size": 48},
    "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
}


@pytest.mark.parametrize("model_type", sorted(TINY_VARIANTS))
def test_transformers_builds_exactly_the_counted_parameters(model_type):
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(model_type, **TINY, **TINY_VARIANTS[model_type])
    model = transformers.AutoModelForCausalLM.from_config(config)
    shape = shape_from_config(config.to_dict(), model_type)
    assert family_of(shape).params(shape) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("content", "words"), [
    (None, "cannot read"),
    ("{not json", "is not JSON"),
    ("[1, 2]", "top level is not an object"),
    ('{"hidden_size": 8}', "has no model_type"),
    ('{"model_type": "bert"}', "'bert' is not one gputop counts"),
    ('{"model_type": "llama", "hidden_size": 64}', "a llama config needs the field"),
    ('{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 3, "num_key_value_heads": 2, '
     '"num_hidden_layers": 1, "vocab_size": 8, "max_position_embeddings": 8, "intermediate_size": 8}',
     "must be a multiple of num_key_value_heads"),
])
def test_a_config_that_cannot_be_counted_is_one_line(tmp_path, content, words):
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ModelConfigError) as caught:
        load_config(str(path))
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)


def test_deepseek_v3_is_refused_naming_what_is_missing():
    with pytest.raises(ModelConfigError, match=r"DeepSeek-V3 is not supported: .*multi-head latent attention"):
        load_config(str(CONFIGS / "deepseek-v3.json"))
