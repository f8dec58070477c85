"""The mixture-of-experts decoder family (Mixtral, Qwen2-MoE, Qwen3-MoE): Llama-shaped attention with an MLP
of routed experts, its presets, a Hugging Face config.json's fields, and its parameter and FLOP counts.

Each layer's router picks ``num_experts_per_tok`` of the ``num_local_experts`` (Mixtral) or ``num_experts``
(Qwen) experts for each token; each expert is a gated MLP of three matrices of ``moe_intermediate_size``
(Mixtral's experts are ``intermediate_size`` wide). Qwen2-MoE adds a shared expert every token passes
through, ``shared_expert_intermediate_size`` wide, behind a one-output gate.

A token's matmuls touch only the experts routed to, so FLOP per token counts the *active* parameters, the
way Megatron-LM's ``num_floating_point_operations`` (megatron/training/training.py) counts
``moe_router_topk`` experts and the shared experts:

    FLOP per token = 6·N_active + 12·L·H·Q·T

N_active is every parameter but the input embedding and the experts not routed to, plus the lm_head matmul;
the attention term is the Llama family's (probes/models/llama.py: the whole score matrix, as every gputop
family counts it, T the sequence or the sliding window where narrower; Megatron-LM counts half of it).
``params`` is the total, as model cards publish it; ``active_params`` the parameters one token uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from probes.models.llama import (
    AttentionShape,
    attention_config_fields,
    attention_layer_params,
    attention_score_flops,
    attention_term_with_values,
    embedding_params,
    matmul_params,
)

FORMULA = "6·N_active + 12·L·H·Q·T"


@dataclass(frozen=True)
class MoeShape(AttentionShape):
    num_experts: int = 0
    experts_per_token: int = 0
    expert_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0  # 0: no shared expert (Mixtral, Qwen3-MoE)

    def problem(self) -> str | None:
        if self.num_experts < 1 or self.expert_intermediate_size < 1:
            return "a mixture of experts needs num_experts and its intermediate size of at least 1"
        if not 1 <= self.experts_per_token <= self.num_experts:
            return (f"num_experts_per_tok ({self.experts_per_token}) must be between 1 and the "
                    f"{self.num_experts} experts")
        return self.attention_problem()

    def describe(self) -> str:
        shared = (f" + a shared expert of {self.shared_expert_intermediate_size}"
                  if self.shared_expert_intermediate_size else "")
        return (f"{self.attention_describe()}, {self.experts_per_token} of {self.num_experts} experts of "
                f"{self.expert_intermediate_size}{shared}")


def _params(shape: MoeShape, experts: int) -> int:
    """Parameters with `experts` routed experts per layer (all of them, or those one token uses)."""
    d = shape.hidden_size
    router = d * shape.num_experts
    routed = experts * 3 * d * shape.expert_intermediate_size
    shared = (3 * d * shape.shared_expert_intermediate_size + d) if shape.shared_expert_intermediate_size else 0
    per_layer = attention_layer_params(shape) + router + routed + shared + 2 * d
    return embedding_params(shape) + shape.num_layers * per_layer + d


def count_params(shape: MoeShape) -> int:
    return _params(shape, shape.num_experts)


def count_active_params(shape: MoeShape) -> int:
    return _params(shape, shape.experts_per_token)


def flops_per_token(shape: MoeShape) -> int:
    return 6 * matmul_params(count_active_params(shape), shape) + attention_score_flops(shape)


def formula_with_values(shape: MoeShape) -> str:
    return (f"{FORMULA} = 6·{matmul_params(count_active_params(shape), shape):,} + "
            f"{attention_term_with_values(shape)}")


# From each model's config.json as its model card publishes it; seq_len is max_position_embeddings.
PRESETS: dict[str, MoeShape] = {
    "mixtral-8x7b": MoeShape(hidden_size=4096, num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128,
                             vocab_size=32000, seq_len=32768, num_experts=8, experts_per_token=2,
                             expert_intermediate_size=14336),
    "qwen1.5-moe-a2.7b": MoeShape(hidden_size=2048, num_layers=24, num_heads=16, num_kv_heads=16, head_dim=128,
                                  vocab_size=151936, seq_len=8192, qkv_bias=True, num_experts=60,
                                  experts_per_token=4, expert_intermediate_size=1408,
                                  shared_expert_intermediate_size=5632),
    "qwen3-30b-a3b": MoeShape(hidden_size=2048, num_layers=48, num_heads=32, num_kv_heads=4, head_dim=128,
                              vocab_size=151936, seq_len=40960, qk_norm=True, num_experts=128,
                              experts_per_token=8, expert_intermediate_size=768),
}


class MoeFamily:
    """Mixture-of-experts decoders behind probes.models' family interface (see ``ModelFamily`` there)."""

    name = "moe"
    description = ("mixture-of-experts decoders (Mixtral, Qwen2-MoE, Qwen3-MoE): Llama-shaped attention, "
                   "a router sending each token to its top-k gated-MLP experts, a shared expert where the "
                   "config has one")
    shape_type = MoeShape
    presets = PRESETS
    formula = FORMULA
    hf_model_types = ("mixtral", "qwen2_moe", "qwen3_moe")
    unsupported = (
        "dense layers between expert layers",  # decoder_sparse_step / mlp_only_layers other than every layer
        "tokens dropped by expert capacity",  # every token is counted at its top-k
        "activation recomputation",
    )

    def params(self, shape: MoeShape) -> int:
        return count_params(shape)

    def active_params(self, shape: MoeShape) -> int:
        return count_active_params(shape)

    def flops_per_token(self, shape: MoeShape) -> int:
        return flops_per_token(shape)

    def attention_flops_per_token(self, shape: MoeShape) -> int:
        return attention_score_flops(shape)

    def formula_with_values(self, shape: MoeShape) -> str:
        return formula_with_values(shape)

    def from_hf_config(self, config: Mapping[str, Any]) -> MoeShape:
        if int(config.get("decoder_sparse_step", 1)) != 1 or config.get("mlp_only_layers"):
            raise ValueError("dense layers between expert layers (decoder_sparse_step, mlp_only_layers) "
                             "are not supported")
        experts = config.get("num_local_experts", config.get("num_experts"))
        width = config.get("moe_intermediate_size", config.get("intermediate_size"))
        if experts is None or width is None:
            raise KeyError("num_local_experts" if experts is None else "moe_intermediate_size")
        return MoeShape(**attention_config_fields(config), num_experts=int(experts),
                        experts_per_token=int(config["num_experts_per_tok"]),
                        expert_intermediate_size=int(width),
                        shared_expert_intermediate_size=int(config.get("shared_expert_intermediate_size") or 0))


FAMILY = MoeFamily()
