"""The GPT-2 family as nanoGPT builds it: its shape, presets, parameter and FLOP counts, and nanoGPT's MFU.

The count is nanoGPT's own (``GPT.estimate_mfu``, after the PaLM paper's appendix B), so a number
gputop prints can be put next to the one nanoGPT printed:

    FLOP per token = 6·N + 12·L·H·Q·T

N is the parameter count without the position embeddings (the lm_head shares the token embedding's
weight, so it is counted once), L layers, H heads, Q = n_embd / H, T the block size. 6·N is forward
plus backward through the weights; 12·L·H·Q·T is the attention score and value matmuls over the whole T×T
score matrix, the causal mask's zeros included: the convention gputop counts every family by
(probes/models/convention.py), so a GPT-2's MFU is nanoGPT's arithmetic exactly.

nanoGPT divides by 312 TFLOP/s, the A100's bf16 dense peak, on whatever GPU it runs; on a faster GPU
that prints an MFU above 100%. ``explain_nanogpt_mfu`` turns such a number back into TFLOP/s and
divides by the right peak. That convention belongs to nanoGPT, so it lives here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from probes.models.convention import PrintedCount

if TYPE_CHECKING:  # only for annotations
    from probes.models.peaks import PeakFlops

NANOGPT_PROMISED_FLOPS = 312e12  # hard-coded in nanoGPT's estimate_mfu: "A100 GPU bfloat16 peak flops"
FORMULA = "6·N + 12·L·H·Q·T"
# How the mfu nanoGPT prints counts a token: this family's formula, so only the peak it divides by differs from
# gputop's. The nanogpt log format carries it (printed_mfu_counts) and explain_nanogpt_mfu says it.
NANOGPT_COUNTS = PrintedCount(by="nanoGPT's estimate_mfu", formula=FORMULA, attention="whole")


@dataclass(frozen=True)
class GptShape:
    """The fields of nanoGPT's GPTConfig that change what the model costs (dropout does not)."""

    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    vocab_size: int
    bias: bool = False  # nanoGPT's default for training from scratch

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def problem(self) -> str | None:
        """Why this shape cannot be built, or None."""
        for name in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
            if getattr(self, name) < 1:
                return f"{name.replace('_', '-')} must be at least 1 (got {getattr(self, name)})"
        if self.n_embd % self.n_head:
            return f"n-embd ({self.n_embd}) must be a multiple of n-head ({self.n_head})"
        return None

    def describe(self) -> str:
        return (f"{self.n_layer} layers, {self.n_head} heads, {self.n_embd} embd, "
                f"block {self.block_size}, vocab {self.vocab_size}{', bias' if self.bias else ''}")


# nanoGPT's configurations, with its vocabulary padded to a multiple of 64 (50257 -> 50304).
PRESETS: dict[str, GptShape] = {
    "tiny": GptShape(n_layer=2, n_head=2, n_embd=64, block_size=64, vocab_size=256),
    "gpt2": GptShape(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50304),
    "gpt2-medium": GptShape(n_layer=24, n_head=16, n_embd=1024, block_size=1024, vocab_size=50304),
    "gpt2-large": GptShape(n_layer=36, n_head=20, n_embd=1280, block_size=1024, vocab_size=50304),
    "gpt2-xl": GptShape(n_layer=48, n_head=25, n_embd=1600, block_size=1024, vocab_size=50304),
}


def count_params(shape: GptShape, *, include_position_embeddings: bool = False) -> int:
    """Parameters of nanoGPT's GPT with this shape (lm_head tied to wte, so counted once)."""
    d = shape.n_embd
    bias = 1 if shape.bias else 0
    layer_norm = d + bias * d
    attention = (d * 3 * d + bias * 3 * d) + (d * d + bias * d)  # c_attn, c_proj
    mlp = (d * 4 * d + bias * 4 * d) + (4 * d * d + bias * d)  # c_fc, c_proj
    per_layer = 2 * layer_norm + attention + mlp
    total = shape.vocab_size * d + shape.n_layer * per_layer + layer_norm  # wte, blocks, ln_f
    if include_position_embeddings:
        total += shape.block_size * d
    return total


def attention_flops_per_token(shape: GptShape) -> int:
    """12·L·H·Q·T: QKᵀ and the weighted sum of V over the whole T×T score matrix, forward and backward."""
    return 12 * shape.n_layer * shape.n_head * shape.head_dim * shape.block_size


def flops_per_token(shape: GptShape) -> int:
    """nanoGPT's 6·N + 12·L·H·Q·T for one token of a full-length sequence, forward and backward."""
    return 6 * count_params(shape) + attention_flops_per_token(shape)


def formula_with_values(shape: GptShape) -> str:
    """'6·N + 12·L·H·Q·T = 6·1,555,201,600 + 12·48·25·64·1024', for showing the work."""
    return (f"{FORMULA} = 6·{count_params(shape):,} + "
            f"12·{shape.n_layer}·{shape.n_head}·{shape.head_dim}·{shape.block_size}")


class MeasuredMfu(Protocol):
    """What explain_nanogpt_mfu reads of an estimate (probes.models.mfu.MfuEstimate is one). Named here rather
    than imported: mfu.py finds each shape's family through probes.models, which imports this module."""

    @property
    def achieved_flops_per_s(self) -> float: ...

    @property
    def peak(self) -> PeakFlops | None: ...

    @property
    def mfu(self) -> float | None: ...


def explain_nanogpt_mfu(reported_pct: float, estimate: MeasuredMfu | None, gpu_name: str | None,
                        peak: PeakFlops | None = None) -> list[str]:
    """Sentences that turn nanoGPT's printed mfu back into TFLOP/s and an MFU against the real peak: the
    estimate's, else `peak` (the GPU's, known where the model's shape is not)."""
    implied = reported_pct / 100.0 * NANOGPT_PROMISED_FLOPS
    lines = [
        (f"nanoGPT's mfu divides by {NANOGPT_PROMISED_FLOPS / 1e12:.0f} TFLOP/s, the A100's bf16 dense peak "
         "hard-coded in estimate_mfu, whatever GPU it runs on.")
    ]
    measured = ""
    if estimate is not None:
        measured = (f"; from tokens per iteration and iteration time: "
                    f"{estimate.achieved_flops_per_s / 1e12:.1f} TFLOP/s")
    lines.append(f"{reported_pct:g}% of {NANOGPT_PROMISED_FLOPS / 1e12:.0f} TFLOP/s = {implied / 1e12:.1f} TFLOP/s "
                 f"achieved{measured}.")
    lines.append(f"{NANOGPT_COUNTS.words()}: the count is the same, the peak it divides by is not.")
    peak = estimate.peak if estimate is not None else peak
    if peak is not None:
        gpu = gpu_name or "this GPU"
        ours = f" ({estimate.mfu * 100:.1f}% from the iteration time)" \
            if estimate is not None and estimate.mfu is not None else ""
        lines.append(f"Against {gpu}'s {peak.flops_per_s / 1e12:.1f} TFLOP/s {peak.dtype} dense peak that is "
                     f"{implied / peak.flops_per_s * 100:.1f}% MFU{ours}.")
    else:
        lines.append("Pass --gpu NAME or --peak-tflops to put that against this GPU's peak.")
    if reported_pct > 100:
        lines.append("An MFU above 100% cannot be: the denominator is wrong, not the hardware outrunning itself.")
    if estimate is not None and estimate.achieved_flops_per_s > 0:
        gap = abs(implied - estimate.achieved_flops_per_s) / estimate.achieved_flops_per_s
        if gap > 0.10:
            lines.append(f"The two differ by {gap * 100:.0f}%: nanoGPT's figure is a running average "
                         "(0.9·previous + 0.1·latest, from its 5th iteration on), so it lags a changing "
                         "iteration time; check the tokens per iteration too.")
    return lines


class Gpt2Family:
    """The GPT-2 architecture behind probes.models' family interface (see ``ModelFamily`` there)."""

    name = "gpt2"
    description = ("GPT-2 as nanoGPT builds it: learned position embeddings, LayerNorm, GELU MLP of 4·d, "
                   "multi-head attention, lm_head tied to the token embedding")
    shape_type = GptShape
    presets = PRESETS
    formula = FORMULA
    hf_model_types = ("gpt2",)
    unsupported = (
        "untied lm_head",  # the shape has no field for it: wte is counted once
        "sequences shorter than the block size",  # the attention term assumes every token sees T positions
        "activation recomputation",  # nanoGPT does not count the extra forward; neither do we, to agree with it
    )

    def params(self, shape: GptShape) -> int:
        return count_params(shape)

    def active_params(self, shape: GptShape) -> int:
        return count_params(shape)

    def flops_per_token(self, shape: GptShape) -> int:
        return flops_per_token(shape)

    def attention_flops_per_token(self, shape: GptShape) -> int:
        return attention_flops_per_token(shape)

    def formula_with_values(self, shape: GptShape) -> str:
        return formula_with_values(shape)

    def from_hf_config(self, config: Mapping[str, Any]) -> GptShape:
        # Hugging Face's GPT2Config: the OpenAI checkpoints have biases in every Linear and LayerNorm.
        return GptShape(n_layer=int(config["n_layer"]), n_head=int(config["n_head"]), n_embd=int(config["n_embd"]),
                        block_size=int(config["n_positions"]), vocab_size=int(config["vocab_size"]), bias=True)


FAMILY = Gpt2Family()
