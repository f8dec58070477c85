"""nanoGPT's GPT as the torch module behind ``gputop probe --model gpt2...``: probes/models/gpt2.py's shape.

Our own implementation with nanoGPT's module names and initialisation (learned positions, LayerNorm without
bias unless the shape has one, a GELU MLP of 4·d, an lm_head tied to the token embedding, GPT-2's scaled init of
the residual projections), so its parameters are exactly ``gpt2.count_params(shape)``. The module offers what the
probe's trainer (probes/reference/gpt_probe.py) expects of every family's model: ``forward(idx, targets)``
returning ``(logits, loss)`` and ``num_params(non_embedding=True)``.

torch is imported inside ``gpt_class`` only: gputop's monitor must work without it.
"""

from __future__ import annotations

import functools
from typing import Any

from probes.models.gpt2 import GptShape


@functools.cache
def gpt_class():
    """nanoGPT's GPT as an nn.Module class, built on first use so that importing this module needs no torch."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class LayerNorm(nn.Module):
        # nn.LayerNorm cannot drop its bias; nanoGPT trains without biases.
        def __init__(self, ndim: int, bias: bool):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(ndim))
            self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

        def forward(self, x):
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)

    class CausalSelfAttention(nn.Module):
        def __init__(self, shape: GptShape):
            super().__init__()
            self.c_attn = nn.Linear(shape.n_embd, 3 * shape.n_embd, bias=shape.bias)
            self.c_proj = nn.Linear(shape.n_embd, shape.n_embd, bias=shape.bias)
            self.n_head = shape.n_head
            self.n_embd = shape.n_embd

        def forward(self, x):
            batch, seq, channels = x.size()
            q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
            heads = (batch, seq, self.n_head, channels // self.n_head)
            q, k, v = (t.view(heads).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(batch, seq, channels))

    class MLP(nn.Module):
        def __init__(self, shape: GptShape):
            super().__init__()
            self.c_fc = nn.Linear(shape.n_embd, 4 * shape.n_embd, bias=shape.bias)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * shape.n_embd, shape.n_embd, bias=shape.bias)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self, shape: GptShape):
            super().__init__()
            self.ln_1 = LayerNorm(shape.n_embd, shape.bias)
            self.attn = CausalSelfAttention(shape)
            self.ln_2 = LayerNorm(shape.n_embd, shape.bias)
            self.mlp = MLP(shape)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        # nanoGPT's ModuleDict (wte, wpe, h, ln_f): torch resolves its members by name at run time, which the
        # checker cannot follow.
        transformer: Any

        def __init__(self, shape: GptShape):
            super().__init__()
            self.shape = shape
            self.transformer = nn.ModuleDict({
                "wte": nn.Embedding(shape.vocab_size, shape.n_embd),
                "wpe": nn.Embedding(shape.block_size, shape.n_embd),
                "h": nn.ModuleList([Block(shape) for _ in range(shape.n_layer)]),
                "ln_f": LayerNorm(shape.n_embd, shape.bias),
            })
            self.lm_head = nn.Linear(shape.n_embd, shape.vocab_size, bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # weight tying, as in GPT-2
            self.apply(self._init_weights)
            for name, param in self.named_parameters():
                if name.endswith("c_proj.weight"):  # GPT-2's scaled init of residual projections
                    torch.nn.init.normal_(param, mean=0.0, std=0.02 / (2 * shape.n_layer) ** 0.5)

        @staticmethod
        def _init_weights(module):
            if isinstance(module, nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def num_params(self, non_embedding: bool = True) -> int:
            total = sum(p.numel() for p in self.parameters())
            if non_embedding:
                total -= self.transformer.wpe.weight.numel()
            return total

        def forward(self, idx, targets):
            _, seq = idx.size()
            pos = torch.arange(0, seq, dtype=torch.long, device=idx.device)
            x = self.transformer.wte(idx) + self.transformer.wpe(pos)
            for block in self.transformer.h:
                x = block(x)
            logits = self.lm_head(self.transformer.ln_f(x))
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
            return logits, loss

    return GPT
