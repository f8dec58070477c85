"""Model FLOPs utilisation: the FLOP a shape costs per token, times tokens per second, over a GPU's peak.

Written against the family interface, so a shape of any family in probes.models.FAMILIES works; how a
family counts its FLOP (and any MFU convention of its own, such as nanoGPT's) stays in that family's module.
"""

from __future__ import annotations

from dataclasses import dataclass

from probes.models import ModelShape, family_of
from probes.models.peaks import PeakFlops


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
