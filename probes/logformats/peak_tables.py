"""The peak a framework divides its printed MFU by, where it keeps a table of its own keyed by the device name
(nanochat's and torchtitan's ``get_peak_flops``): which row it takes for the GPU gputop reads, and whether that
row is the GPU's own dense bf16 peak (gputop's table, ``probes/models/peaks.py``).

Such a table is matched by substrings of the name in the order the framework tries them, so it can take a row
meant for another GPU (nanochat's ``"l4"`` row matches an L40) or miss the GPU and fall back (nanochat divides by
infinity and prints 0.00; torchtitan assumes an A100's 312 TFLOP/s). The printed MFU is then no MFU of this GPU,
and gputop says so beside it rather than leaving a reader to compare two figures that divide by different peaks.
"""

from __future__ import annotations

from dataclasses import dataclass

from probes.models.peaks import peak_flops

# A framework's row and gputop's peak that differ by no more than this are the same figure written another way
# (nanochat's 989e12 for an H100 SXM, gputop's 989.5 TFLOP/s).
SAME_PEAK = 0.01


@dataclass(frozen=True)
class PeakRow:
    """One row of a framework's table: every substring must be in the device name (as the framework compares
    it: lower-cased or not) for the row to apply."""

    needles: tuple[str, ...]
    flops_per_s: float


@dataclass(frozen=True)
class PeakTable:
    """A framework's per-device table of the bf16 dense peak its printed MFU divides by, transcribed from its
    source in its own order (the first row that applies wins)."""

    by: str  # who looks it up, as said to a person: "nanochat's get_peak_flops"
    rows: tuple[PeakRow, ...]
    lower_cases: bool  # the framework lower-cases the device name before matching (nanochat does, torchtitan not)
    # What it divides by for a device no row applies to: None for infinity (the MFU prints as 0), else FLOP/s, and
    # that fallback in words ("divides by infinity, so its MFU prints 0.00"; "an A100's").
    fallback_flops_per_s: float | None
    fallback_words: str

    def row_for(self, device_name: str) -> PeakRow | None:
        name = device_name.lower() if self.lower_cases else device_name
        return next((row for row in self.rows if all(needle in name for needle in row.needles)), None)

    def divides_by_infinity(self, device_name: str) -> bool:
        """No row applies and its fallback is infinity: the MFU it prints on this device is 0."""
        return self.fallback_flops_per_s is None and self.row_for(device_name.strip()) is None

    def sentence(self, gpu_name: str) -> str:
        """What the printed MFU is against on this GPU, flagged where that is not the GPU's dense bf16 peak."""
        gpu = gpu_name.strip()
        ours = peak_flops(gpu, "bf16")
        own = f"{_tflops(ours.flops_per_s)} TFLOP/s in gputop's table" if ours is not None else None
        row = self.row_for(gpu)
        divisor = row.flops_per_s if row is not None else self.fallback_flops_per_s
        if divisor is None:
            head = f"The log's MFU: {self.by} has no row for the {gpu} and {self.fallback_words}"
            return f"{head}; the GPU's bf16 dense peak is {own}." if own else f"{head}."
        which = f"{self.by} row for the {gpu}" if row is not None else \
            f"{self.by} fallback for a GPU not in its table ({self.fallback_words}; the {gpu})"
        theirs = f"{_tflops(divisor)} TFLOP/s per GPU, {which}"
        if ours is None:
            return f"The log's MFU is against {theirs}; gputop's table has no peak for this GPU to check it against."
        if abs(divisor / ours.flops_per_s - 1) <= SAME_PEAK:
            return f"The log's MFU is against {theirs}: the GPU's own bf16 dense peak."
        return (f"The log's MFU is against {theirs}, not this GPU's peak: its bf16 dense peak is {own}, so the "
                f"log's figure × {divisor / ours.flops_per_s:.3g} is its MFU on this GPU by the log's FLOP count.")


def _tflops(flops_per_s: float) -> str:
    return f"{flops_per_s / 1e12:,.4g}"
