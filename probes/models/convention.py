"""How attention is counted in an MFU: gputop's one convention, and how the frameworks that print their own MFU
(or achieved FLOP/s) count theirs, so that a printed figure is never set beside gputop's without it.

A token's attention costs 12·L·H·Q·S FLOP in a training step: QKᵀ and the weighted sum of V are 2·Q·S FLOP each
per head forward, three times that with the backward, over L layers of H heads of width Q, S the keys the token
is counted against. Two conventions fill in S:

- the whole score matrix, S = T: every query counted against the whole sequence, the causal mask's zeros
  included. PaLM (appendix B), nanoGPT's ``estimate_mfu``, torchtitan's ``get_nparams_and_flops`` and
  llm-foundry's MPT (Composer's ``flops_per_batch``) count this way, and Megatron-LM did before v0.12.
- the causal half, S = T/2: a query sees half the sequence on average. Megatron-LM's
  ``num_floating_point_operations`` (since v0.12, "causal mask (only half of the mask is non-zero)") and llm.c's
  ``gpt2_estimate_mfu`` (6·N + 6·L·C·T, after Kaplan et al.) count this way.

gputop counts the whole matrix for every family (docs/models.md says why): its MFU for a nanoGPT run is nanoGPT's
own arithmetic against the right peak, and a Llama's is torchtitan's. A count of the causal half is lower by
6·L·H·Q·T per token; ``PrintedCount.share`` turns gputop's figure into one counted that way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Attention = Literal["whole", "causal"]

GPUTOP_ATTENTION: Attention = "whole"
# Said under every formula line gputop prints (`gputop mfu`, `gputop probe`): a row of an 80-column report.
ATTENTION_CONVENTION = "whole T×T score matrix (PaLM, nanoGPT); Megatron-LM counts half"


@dataclass(frozen=True)
class PrintedCount:
    """How the FLOPs behind the MFU or achieved FLOP/s a framework prints count a token."""

    by: str  # who counts: "nanoGPT's estimate_mfu"
    formula: str  # the count in gputop's symbols: "6·N + 12·L·H·Q·T"
    attention: Attention | None  # None: the framework takes the model's own count, whichever convention it uses
    model_note: str = ""  # for attention None: what the usual models count ("llm-foundry's MPT: the whole ...")

    def words(self) -> str:
        """'torchtitan's get_nparams_and_flops counts 6·N + 12·L·H·Q·T, attention over the whole T×T score
        matrix as gputop does': who counts, how, and against gputop's convention."""
        head = f"{self.by} counts {self.formula}"
        if self.attention == GPUTOP_ATTENTION:
            return f"{head}, attention over the whole T×T score matrix as gputop does"
        if self.attention == "causal":
            return f"{head}, attention over the causal half of the score matrix (gputop counts the whole)"
        note = f" ({self.model_note})" if self.model_note else ""
        return f"{head}, attention as the model counts it{note}"

    def short(self) -> str:
        """A clause to follow a printed figure: 'counting attention over the causal half, gputop the whole
        matrix'."""
        if self.attention == GPUTOP_ATTENTION:
            return "counting attention over the whole matrix, as gputop does"
        if self.attention == "causal":
            return "counting attention over the causal half, gputop the whole matrix"
        return f"counting {self.formula}"

    @property
    def differs(self) -> bool:
        """Whether the figure is known to count attention otherwise than gputop (not: unknown)."""
        return self.attention is not None and self.attention != GPUTOP_ATTENTION

    def share(self, flops_per_token: int, attention_flops_per_token: int) -> float | None:
        """The share of gputop's FLOP per token this count gives for the same shape (1 for the whole matrix,
        (F − A/2) / F for the causal half, A being gputop's 12·L·H·Q·T), so gputop's figure times it is gputop's
        figure counted this way; None where the count is the model's own."""
        if self.attention is None or flops_per_token <= 0:
            return None
        if self.attention == GPUTOP_ATTENTION:
            return 1.0
        return (flops_per_token - attention_flops_per_token / 2) / flops_per_token
