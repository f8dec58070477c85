"""The mixture-of-experts model behind ``gputop probe`` for probes/models/moe.py's shapes (Mixtral, Qwen-MoE).

The Llama-shaped model (probes/reference/llama_probe_model.py) with each layer's MLP replaced by routed experts: a
router (d × num_experts, no bias) scores the experts, each token goes to its ``experts_per_token`` best,
weighted by their softmax probabilities renormalised over the chosen ones (Mixtral's rule; the cost does
not depend on it), and each expert is a SwiGLU MLP of ``expert_intermediate_size``. Where the shape has a
shared expert (Qwen2-MoE), every token also passes through it, scaled by a one-output sigmoid gate. Its
parameters are exactly ``moe.count_params(shape)``.

The experts run in a plain loop over the experts, each on the tokens routed to it: a reference step, not
a grouped-GEMM kernel, so on a GPU it is slower than a tuned MoE implementation would be.

torch is imported inside ``moe_class`` only: gputop's monitor must work without it.
"""

from __future__ import annotations

import functools
from typing import Any

from probes.models.moe import MoeShape
from probes.reference.llama_probe_model import llama_class


@functools.cache
def moe_class():
    """The mixture-of-experts decoder as an nn.Module class, built on first use (torch)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    # Any: the class is built at run time (torch is imported on first use), so the checker cannot take it for a
    # base class of its own.
    llama: Any = llama_class()
    gated_mlp = llama.GatedMlp

    class RoutedExperts(nn.Module):
        def __init__(self, shape: MoeShape):
            super().__init__()
            self.experts_per_token = shape.experts_per_token
            self.gate = nn.Linear(shape.hidden_size, shape.num_experts, bias=False)  # the router
            self.experts = nn.ModuleList([gated_mlp(shape.hidden_size, shape.expert_intermediate_size)
                                          for _ in range(shape.num_experts)])
            self.shared_expert = None
            if shape.shared_expert_intermediate_size:
                self.shared_expert = gated_mlp(shape.hidden_size, shape.shared_expert_intermediate_size)
                self.shared_expert_gate = nn.Linear(shape.hidden_size, 1, bias=False)

        def forward(self, x):
            batch, seq, d = x.size()
            tokens = x.reshape(-1, d)
            probabilities = F.softmax(self.gate(tokens), dim=-1, dtype=torch.float32)
            weights, chosen = probabilities.topk(self.experts_per_token, dim=-1)
            weights = (weights / weights.sum(dim=-1, keepdim=True)).to(tokens.dtype)
            out = torch.zeros_like(tokens)
            for index, expert in enumerate(self.experts):
                rows, slot = (chosen == index).nonzero(as_tuple=True)
                if rows.numel():
                    out = out.index_add(0, rows, expert(tokens[rows]) * weights[rows, slot, None])
            if self.shared_expert is not None:
                out = out + torch.sigmoid(self.shared_expert_gate(tokens)) * self.shared_expert(tokens)
            return out.view(batch, seq, d)

    class MoeModel(llama):
        @staticmethod
        def make_mlp(shape) -> nn.Module:
            return RoutedExperts(shape)

    return MoeModel
