"""The Llama-shaped decoder family (Llama 2/3, Mistral, Qwen2/3, Gemma): its shape, presets, a Hugging Face
config.json's fields, and its parameter and FLOP counts.

What makes a model Llama-shaped: RMSNorm, rotary positions (no position-embedding weights), grouped-query
attention whose K and V projections are ``num_key_value_heads × head_dim`` wide, a SwiGLU (GeGLU for Gemma)
MLP of three matrices of ``intermediate_size``, and an ``lm_head`` of its own unless
``tie_word_embeddings``.

FLOP per token is torchtitan's ``get_nparams_and_flops`` count (Megatron-LM's ``num_floating_point_operations``
for the weights), with attention over the whole score matrix as every gputop family counts it
(probes/models/convention.py):

    FLOP per token = 6·N + 12·L·H·Q·T

N is the parameters a token's matmuls touch: every parameter except the input embedding, plus the
lm_head matmul (V·d) whether or not its weight is tied to the embedding, since the logits are computed
either way. Norms and biases are in N too (Megatron leaves them out: well under 0.1%). L layers, H query
heads, Q head_dim, T the sequence: QKᵀ and the weighted sum of V are 2·Q·T FLOP each per head forward, three
times that with the backward, every query counted against the whole sequence, the causal mask's zeros
included, as PaLM, nanoGPT and torchtitan count. Megatron-LM (since v0.12) counts the causal half, T/2, so its
figure is lower by 6·L·H·Q·T. With a sliding window W < T a query reaches W keys, not T: T in the attention
term is the window (the whole band of the matrix, its causal corner at the start not taken off, as the causal
half is not taken off without a window); torchtitan and Megatron have no window term.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

FORMULA = "6·N + 12·L·H·Q·T"


@dataclass(frozen=True)
class AttentionShape:
    """The grouped-query attention every Llama-shaped layer has (the MoE family reuses it)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    seq_len: int  # T: tokens per sequence in training (the config's max_position_embeddings unless given)
    tie_word_embeddings: bool = False
    qkv_bias: bool = False  # Qwen2 has biases on q, k and v
    qk_norm: bool = False  # Qwen3 normalises q and k per head (head_dim weights each)
    sliding_window: int | None = None

    def attention_problem(self) -> str | None:
        for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "vocab_size",
                     "seq_len"):
            if getattr(self, name) < 1:
                return f"{name} must be at least 1 (got {getattr(self, name)})"
        if self.num_heads % self.num_kv_heads:
            return f"num_attention_heads ({self.num_heads}) must be a multiple of num_key_value_heads " \
                   f"({self.num_kv_heads})"
        if self.sliding_window is not None and self.sliding_window < 1:
            return f"sliding_window must be at least 1 (got {self.sliding_window})"
        return None

    def attention_describe(self) -> str:
        window = f", sliding window {self.sliding_window}" if self.window_applies else ""
        tied = ", lm_head tied" if self.tie_word_embeddings else ""
        return (f"{self.num_layers} layers, d {self.hidden_size}, {self.num_heads} heads "
                f"({self.num_kv_heads} K/V) of {self.head_dim}, seq {self.seq_len}{window}, "
                f"vocab {self.vocab_size}{tied}")

    @property
    def window_applies(self) -> bool:
        return self.sliding_window is not None and self.sliding_window < self.seq_len

    @property
    def block_size(self) -> int:
        """The sequence length under nanoGPT's name, so tokens per iteration read the same for every family."""
        return self.seq_len


def attention_layer_params(shape: AttentionShape) -> int:
    """q, k, v and o projections (with q/k/v biases and q/k norms where the model has them) of one layer."""
    d, q_width, kv_width = shape.hidden_size, shape.num_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim
    projections = d * q_width + 2 * d * kv_width + q_width * d
    biases = (q_width + 2 * kv_width) if shape.qkv_bias else 0
    norms = 2 * shape.head_dim if shape.qk_norm else 0
    return projections + biases + norms


def embedding_params(shape: AttentionShape) -> int:
    """The input embedding, and the lm_head when it has a weight of its own."""
    return shape.vocab_size * shape.hidden_size * (1 if shape.tie_word_embeddings else 2)


def attention_reach(shape: AttentionShape) -> int:
    """T of the attention term: the keys a query is counted against, the whole sequence, or the sliding window
    where it is narrower (never half of either: gputop counts the whole score matrix, convention.py)."""
    window = shape.sliding_window
    return window if window is not None and shape.window_applies else shape.seq_len


def attention_score_flops(shape: AttentionShape) -> int:
    """12·L·H·Q·T: QKᵀ and the weighted sum of V, forward and backward, per token."""
    return 12 * shape.num_layers * shape.num_heads * shape.head_dim * attention_reach(shape)


def attention_term_with_values(shape: AttentionShape) -> str:
    """'12·32·32·128·8192', and what T stands for where it is not the sequence (a sliding window)."""
    term = f"12·{shape.num_layers}·{shape.num_heads}·{shape.head_dim}·{attention_reach(shape)}"
    if shape.window_applies:
        term += f" (T: the {shape.sliding_window:,}-token sliding window)"
    return term


def matmul_params(total_params: int, shape: AttentionShape) -> int:
    """N of the formula from all (or all active) parameters: less the input embedding's lookup, plus the
    lm_head's matmul when that weight is the embedding's."""
    lm_head_if_tied = shape.vocab_size * shape.hidden_size if shape.tie_word_embeddings else 0
    return total_params - shape.vocab_size * shape.hidden_size + lm_head_if_tied


def attention_config_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """The AttentionShape fields a Hugging Face config.json gives (KeyError names a missing one)."""
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    model_type = config.get("model_type")
    # Mistral and Qwen2 configs carry sliding_window even when it is off; use_sliding_window says so.
    window = config.get("sliding_window")
    if config.get("use_sliding_window") is False:
        window = None
    return {
        "hidden_size": hidden,
        "num_layers": int(config["num_hidden_layers"]),
        "num_heads": heads,
        "num_kv_heads": int(config.get("num_key_value_heads") or heads),
        "head_dim": int(config.get("head_dim") or hidden // heads),
        "vocab_size": int(config["vocab_size"]),
        "seq_len": int(config["max_position_embeddings"]),
        # Gemma ties by default and its configs often leave the key out; the others untie by default.
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", model_type == "gemma")),
        # Qwen2 (and Qwen2-MoE) always put biases on q, k and v; others say so with attention_bias.
        "qkv_bias": model_type in ("qwen2", "qwen2_moe") or bool(config.get("attention_bias", False)),
        "qk_norm": model_type in ("qwen3", "qwen3_moe"),
        "sliding_window": int(window) if window else None,
    }


@dataclass(frozen=True)
class LlamaShape(AttentionShape):
    intermediate_size: int = 0  # each of the MLP's gate, up and down matrices is d × intermediate_size

    def problem(self) -> str | None:
        if self.intermediate_size < 1:
            return f"intermediate_size must be at least 1 (got {self.intermediate_size})"
        return self.attention_problem()

    def describe(self) -> str:
        return f"{self.attention_describe()}, MLP {self.intermediate_size}"


def count_params(shape: LlamaShape) -> int:
    """Every parameter: embeddings (lm_head once when tied), per layer attention, the gated MLP's three
    matrices and two RMSNorms, and the final norm."""
    d = shape.hidden_size
    per_layer = attention_layer_params(shape) + 3 * d * shape.intermediate_size + 2 * d
    return embedding_params(shape) + shape.num_layers * per_layer + d


def flops_per_token(shape: LlamaShape) -> int:
    return 6 * matmul_params(count_params(shape), shape) + attention_score_flops(shape)


def formula_with_values(shape: LlamaShape) -> str:
    return (f"{FORMULA} = 6·{matmul_params(count_params(shape), shape):,} + "
            f"{attention_term_with_values(shape)}")


# From each model's config.json as its model card publishes it; seq_len is max_position_embeddings.
PRESETS: dict[str, LlamaShape] = {
    "llama-3-8b": LlamaShape(hidden_size=4096, num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128,
                             vocab_size=128256, seq_len=8192, intermediate_size=14336),
    "mistral-7b": LlamaShape(hidden_size=4096, num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128,
                             vocab_size=32000, seq_len=32768, sliding_window=4096, intermediate_size=14336),
    "qwen2-7b": LlamaShape(hidden_size=3584, num_layers=28, num_heads=28, num_kv_heads=4, head_dim=128,
                           vocab_size=152064, seq_len=131072, qkv_bias=True, intermediate_size=18944),
    "gemma-7b": LlamaShape(hidden_size=3072, num_layers=28, num_heads=16, num_kv_heads=16, head_dim=256,
                           vocab_size=256000, seq_len=8192, tie_word_embeddings=True, intermediate_size=24576),
}


class LlamaFamily:
    """Llama-shaped decoders behind probes.models' family interface (see ``ModelFamily`` there)."""

    name = "llama"
    description = ("Llama-shaped decoders (Llama 2/3, Mistral, Qwen2/3, Gemma): RMSNorm, rotary positions, "
                   "grouped-query attention, a gated MLP of three matrices, lm_head untied unless the config ties it")
    shape_type = LlamaShape
    presets = PRESETS
    formula = FORMULA
    hf_model_types = ("llama", "mistral", "qwen2", "qwen3", "gemma")
    unsupported = (
        "Gemma 2/3 (extra norms, alternating windows)",
        "sequences shorter than seq_len",  # the attention term assumes every sequence is full
        "activation recomputation",  # Megatron does not count the extra forward either
    )

    def params(self, shape: LlamaShape) -> int:
        return count_params(shape)

    def active_params(self, shape: LlamaShape) -> int:
        return count_params(shape)

    def flops_per_token(self, shape: LlamaShape) -> int:
        return flops_per_token(shape)

    def attention_flops_per_token(self, shape: LlamaShape) -> int:
        return attention_score_flops(shape)

    def formula_with_values(self, shape: LlamaShape) -> str:
        return formula_with_values(shape)

    def from_hf_config(self, config: Mapping[str, Any]) -> LlamaShape:
        return LlamaShape(**attention_config_fields(config), intermediate_size=int(config["intermediate_size"]))


FAMILY = LlamaFamily()
