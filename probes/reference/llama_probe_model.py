"""The Llama-shaped model behind ``gputop probe --config``: probes/models/llama.py's shape as a torch module.

Written from the shape, not from transformers (which stays a test-only dependency): RMSNorm before
attention and MLP, rotary positions on q and k, grouped-query attention whose K and V projections are
``num_kv_heads × head_dim`` wide (q/k/v biases and per-head q/k norms where the shape has them), a SwiGLU
MLP of three ``intermediate_size`` matrices, a final RMSNorm and an ``lm_head`` tied to the embedding only
when the shape says so. Its parameters are exactly ``llama.count_params(shape)``; Gemma's GeGLU is built
as SwiGLU (the same matrices and FLOPs: the probe times cost, not the activation's curve).

The mixture-of-experts model (probes/reference/moe_probe_model.py) is this one with routed experts as each layer's
MLP (``make_mlp``; the SwiGLU MLP is ``GatedMlp`` on the class). The module offers what the probe's
trainer expects of every family's model: ``forward(idx, targets)`` returning ``(logits, loss)`` and
``num_params(non_embedding=True)``.

torch is imported inside ``llama_class`` only: gputop's monitor must work without it.
"""

from __future__ import annotations

import functools
from typing import ClassVar

from probes.models.llama import LlamaShape

ROPE_THETA = 10000.0  # the rotary base changes which angles are computed, not what they cost
NORM_EPS = 1e-6


@functools.cache
def llama_class():
    """The Llama-shaped decoder as an nn.Module class, built on first use so importing this module needs no torch."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    def rotate_half(x):
        first, second = x.chunk(2, dim=-1)
        return torch.cat((-second, first), dim=-1)

    class Attention(nn.Module):
        def __init__(self, shape: LlamaShape):
            super().__init__()
            d = shape.hidden_size
            q_width, kv_width = shape.num_heads * shape.head_dim, shape.num_kv_heads * shape.head_dim
            self.q_proj = nn.Linear(d, q_width, bias=shape.qkv_bias)
            self.k_proj = nn.Linear(d, kv_width, bias=shape.qkv_bias)
            self.v_proj = nn.Linear(d, kv_width, bias=shape.qkv_bias)
            self.o_proj = nn.Linear(q_width, d, bias=False)
            self.q_norm = nn.RMSNorm(shape.head_dim, eps=NORM_EPS) if shape.qk_norm else None
            self.k_norm = nn.RMSNorm(shape.head_dim, eps=NORM_EPS) if shape.qk_norm else None
            self.shape = shape

        def forward(self, x, cos, sin, window_mask):
            batch, seq, _ = x.size()
            shape = self.shape
            q = self.q_proj(x).view(batch, seq, shape.num_heads, shape.head_dim)
            k = self.k_proj(x).view(batch, seq, shape.num_kv_heads, shape.head_dim)
            v = self.v_proj(x).view(batch, seq, shape.num_kv_heads, shape.head_dim)
            if self.q_norm is not None and self.k_norm is not None:  # both or neither (shape.qk_norm)
                q, k = self.q_norm(q), self.k_norm(k)
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            # enable_gqa lets each K/V head serve its group of query heads without copying K and V.
            gqa = shape.num_kv_heads != shape.num_heads
            if window_mask is None:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
            else:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=window_mask, enable_gqa=gqa)
            return self.o_proj(y.transpose(1, 2).reshape(batch, seq, shape.num_heads * shape.head_dim))

    class GatedMlp(nn.Module):
        def __init__(self, hidden_size: int, intermediate_size: int):
            super().__init__()
            self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
            self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
            self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class DecoderLayer(nn.Module):
        def __init__(self, shape: LlamaShape, mlp: nn.Module):
            super().__init__()
            self.input_layernorm = nn.RMSNorm(shape.hidden_size, eps=NORM_EPS)
            self.self_attn = Attention(shape)
            self.post_attention_layernorm = nn.RMSNorm(shape.hidden_size, eps=NORM_EPS)
            self.mlp = mlp

        def forward(self, x, cos, sin, window_mask):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin, window_mask)
            return x + self.mlp(self.post_attention_layernorm(x))

    class LlamaModel(nn.Module):
        GatedMlp: ClassVar[type[nn.Module]]  # the SwiGLU MLP, set once the class is built

        def __init__(self, shape: LlamaShape):
            super().__init__()
            self.shape = shape
            self.embed_tokens = nn.Embedding(shape.vocab_size, shape.hidden_size)
            self.layers = nn.ModuleList([DecoderLayer(shape, self.make_mlp(shape)) for _ in range(shape.num_layers)])
            self.norm = nn.RMSNorm(shape.hidden_size, eps=NORM_EPS)
            self.lm_head = nn.Linear(shape.hidden_size, shape.vocab_size, bias=False)
            self.apply(self._init_weights)
            if shape.tie_word_embeddings:
                self.lm_head.weight = self.embed_tokens.weight

        @staticmethod
        def make_mlp(shape) -> nn.Module:
            """Each layer's MLP; the mixture-of-experts model (probes/reference/moe_probe_model.py) routes instead."""
            return GatedMlp(shape.hidden_size, shape.intermediate_size)

        @staticmethod
        def _init_weights(module):
            if isinstance(module, (nn.Linear, nn.Embedding)):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                torch.nn.init.zeros_(module.bias)

        def num_params(self, non_embedding: bool = True) -> int:
            # Rotary positions have no weights: there is no position embedding to leave out.
            return sum(p.numel() for p in self.parameters())

        def rotary(self, seq: int, device):
            half = self.shape.head_dim // 2
            inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, half, device=device, dtype=torch.float32) / half))
            angles = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv_freq)
            angles = torch.cat((angles, angles), dim=-1)
            return angles.cos(), angles.sin()

        def window_mask(self, seq: int, device):
            """Causal and at most sliding_window keys back; None when the window does not bite."""
            window = self.shape.sliding_window
            if window is None or window >= seq:
                return None
            positions = torch.arange(seq, device=device)
            distance = positions[:, None] - positions[None, :]
            return (distance >= 0) & (distance < window)

        def forward(self, idx, targets):
            _, seq = idx.size()
            x = self.embed_tokens(idx)
            cos, sin = self.rotary(seq, idx.device)
            cos, sin = cos.to(x.dtype), sin.to(x.dtype)
            window_mask = self.window_mask(seq, idx.device)
            for layer in self.layers:
                x = layer(x, cos, sin, window_mask)
            logits = self.lm_head(self.norm(x))
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
            return logits, loss

    LlamaModel.GatedMlp = GatedMlp  # the experts of the mixture-of-experts model are these
    return LlamaModel
