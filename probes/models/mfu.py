"""Model FLOPs utilisation: the FLOP a shape costs per token, times tokens per second, over a GPU's peak, and
what to check when the result cannot be right.

Written against the family interface, so a shape of any family in probes.models.FAMILIES works; how a
family counts its FLOP (and any MFU convention of its own, such as nanoGPT's) stays in that family's module.

An MFU above 100% is impossible and one below 1% is implausible for a training step on a GPU; either way one
of the four inputs is wrong. ``mfu_doubts`` names each with its value, so the number never stands alone:
the peak (which GPU it was taken for, and the one NVML sees), tokens per iteration (the accumulation
factor, and for a job on several GPUs their number), the iteration time, and the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from probes.models import ModelShape, family_of
from probes.models.peaks import PeakFlops, peak_flops

MFU_CEILING = 1.0  # no step beats the hardware's dense peak
MFU_FLOOR = 0.01  # even a small model on a big GPU does better; below this an input is off


@dataclass(frozen=True)
class MfuEstimate:
    flops_per_token: int
    tokens_per_iter: int
    flops_per_iter: float
    seconds_per_iter: float
    achieved_flops_per_s: float
    peak: PeakFlops | None
    mfu: float | None  # fraction of peak (0.52 = 52%); None without a peak


def estimate_mfu(shape: ModelShape, tokens_per_iter: int, seconds_per_iter: float,
                 peak: PeakFlops | None) -> MfuEstimate:
    per_token = family_of(shape).flops_per_token(shape)
    per_iter = float(per_token) * tokens_per_iter
    achieved = per_iter / seconds_per_iter
    mfu = achieved / peak.flops_per_s if peak is not None and peak.flops_per_s > 0 else None
    return MfuEstimate(per_token, tokens_per_iter, per_iter, seconds_per_iter, achieved, peak, mfu)


def mfu_doubts(estimate: MfuEstimate, shape: ModelShape, *, gpu_seen: str | None,
               grad_accum: int | None = None) -> tuple[str, ...]:
    """What is wrong with an MFU above 100% or below 1%, one sentence per suspect input; () when the MFU
    is plausible or unknown. gpu_seen: the GPU NVML reports where the job runs (None: none seen)."""
    if estimate.mfu is None or estimate.peak is None or MFU_FLOOR <= estimate.mfu <= MFU_CEILING:
        return ()
    pct = estimate.mfu * 100
    high = estimate.mfu > MFU_CEILING
    peak = estimate.peak
    head = (f"An MFU of {pct:.1f}% cannot be: no step runs faster than the GPU's peak, so an input is wrong."
            if high else
            f"An MFU of {pct:.2g}% is below what a training step on a GPU reaches (1%): an input is likely wrong.")
    doubts = [head, f"The peak: {peak.flops_per_s / 1e12:.1f} TFLOP/s {peak.dtype} dense, from {peak.source}."
              + _peak_advice(peak, gpu_seen, high)]
    accumulation = f" with grad-accum {grad_accum}" if grad_accum else ""
    if high:
        doubts.append(f"Tokens per iteration: {estimate.tokens_per_iter:,}{accumulation}. If the time "
                      f"({estimate.seconds_per_iter:g} s) is one micro-step, the tokens must be one micro-step's "
                      "(batch × sequence), not the optimizer step's (× the accumulation factor).")
        doubts.append(f"The model: {shape.describe()}. A larger shape than the job trains counts FLOP it "
                      "never runs.")
        doubts.append("The GPUs: the peak is one GPU's. For a job on several, give one GPU's share of the "
                      "tokens per iteration (divide them by the data-parallel ranks).")
    else:
        doubts.append(f"Tokens per iteration: {estimate.tokens_per_iter:,}{accumulation}. An optimizer step of "
                      "several micro-steps holds batch × sequence × the accumulation factor.")
        doubts.append(f"The iteration time: {estimate.seconds_per_iter:g} s. One that includes evaluation, "
                      "checkpoints or start-up is not a training step's.")
        doubts.append(f"The model: {shape.describe()}. A smaller shape than the job trains misses its FLOP.")
    return tuple(doubts)


def _peak_advice(peak: PeakFlops, gpu_seen: str | None, high: bool) -> str:
    if gpu_seen:
        seen = peak_flops(gpu_seen, peak.dtype)
        if seen is None:
            return f" NVML sees {gpu_seen!r} here, which gputop's table lacks: pass its --peak-tflops."
        if abs(seen.flops_per_s - peak.flops_per_s) > 0.005 * peak.flops_per_s:
            return (f" NVML sees {gpu_seen!r} here, whose peak is {seen.flops_per_s / 1e12:.1f} TFLOP/s: "
                    f"pass --gpu {gpu_seen!r} or leave --gpu out.")
        return f" NVML sees {gpu_seen!r} here: the GPU is right; is the dtype?"
    if peak.source == "--peak-tflops" and high:
        return " A datasheet figure may be the 2:4-sparsity one, twice the dense peak."
    return " NVML sees no GPU here to check it against."
