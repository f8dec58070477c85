"""Dense peak FLOP/s per GPU and dtype, looked up by the name NVML (or torch) reports.

MFU is only as honest as its denominator, so every figure here is a *dense* peak (no 2:4 sparsity) for
the math a training step actually runs: bf16/fp16 tensor-core matmuls with fp32 accumulation, tf32
tensor-core matmuls, plain fp32 FMA, and fp8 where the hardware has it. Vendor sheets often quote the
2:4-sparsity figure (marked with an asterisk on the sheet): those are halved here. GeForce cards run
fp16/bf16 tensor math with fp32 accumulation at half the rate of fp16 accumulation; the table holds the
fp32-accumulate figure because that is what PyTorch uses.

Matching: exact NVML names first, then the pattern whose match covers the most of the name, so that
H20 is not taken for an H200, an H200 for a GH200, an L4 for an L40S, or an A10 for an A100 or A10G.
Patterns use word boundaries for the same reason. A GPU not in the table gets None: the caller asks for
``--peak-tflops``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TERA = 1e12

DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp8")

_DTYPE_ALIASES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "tf32": "tf32",
    "tensorfloat32": "tf32",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "fp8": "fp8",
    "float8": "fp8",
}


def normalize_dtype(dtype: str) -> str | None:
    """'bfloat16' -> 'bf16', etc.; None for a dtype the table has no column for."""
    return _DTYPE_ALIASES.get(dtype.strip().lower().replace("torch.", ""))


@dataclass(frozen=True)
class GpuPeak:
    """One product's dense peaks in TFLOP/s; None where the hardware has no such path."""

    model: str  # what we call it in output, e.g. "H200 SXM"
    nvml_names: tuple[str, ...]  # exact names as NVML reports them
    pattern: str | None  # regex (case-insensitive) for names not listed exactly
    bf16: float | None
    fp16: float | None
    tf32: float | None
    fp32: float | None
    fp8: float | None
    source: str  # the vendor document the figures come from

    def tflops(self, dtype: str) -> float | None:
        key = normalize_dtype(dtype)
        return getattr(self, key) if key else None


@dataclass(frozen=True)
class PeakMatch:
    entry: GpuPeak
    how: str  # "exact" or "pattern"
    matched: str  # the NVML name or the pattern that matched: for lookups, never for a person's eyes

    def describe(self, name: str) -> str:
        """Which entry a GPU name was taken for, in words (no pattern text)."""
        if self.how == "exact":
            return self.entry.model
        return f"{self.entry.model}, the closest entry to {name.strip()!r} (not an exact name in the table)"


@dataclass(frozen=True)
class PeakFlops:
    """A peak chosen for one GPU and dtype, with where it comes from, ready to print."""

    flops_per_s: float
    dtype: str
    source: str  # e.g. "gputop's table: H200 SXM; NVIDIA H200 Tensor Core GPU datasheet, ..."


# Figures shared by several products (same silicon and clocks).
_A100 = {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5, "fp8": None}
_A100_SOURCE = "NVIDIA A100 Tensor Core GPU datasheet (sparse 624/312 halved)"
_HOPPER_SXM = {"bf16": 989.5, "fp16": 989.5, "tf32": 494.5, "fp32": 67.0, "fp8": 1979.0}
_HOPPER_NVL = {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0, "fp8": 1670.5}

PEAK_TABLE: tuple[GpuPeak, ...] = (
    # --- Ampere data center ---
    GpuPeak("A100 SXM4 40GB", ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"), r"\bA100\b", **_A100,
            source=_A100_SOURCE),
    GpuPeak("A100 SXM4 80GB", ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB", "NVIDIA A100-SXM-80GB"),
            r"\bA100-SXM\w*-80GB\b", **_A100, source=_A100_SOURCE),
    GpuPeak("A100 PCIe 40GB", ("NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB"), r"\bA100-PCIE-40GB\b", **_A100,
            source=_A100_SOURCE),
    GpuPeak("A100 PCIe 80GB", ("NVIDIA A100 80GB PCIe", "NVIDIA A100-PCIE-80GB"), r"\bA100\b.*\bPCIE\b",
            **_A100, source=_A100_SOURCE),
    # GA102: the A10 runs tensor math at the full data-center rate.
    GpuPeak("A10", ("NVIDIA A10",), r"\bA10\b", bf16=125.0, fp16=125.0, tf32=62.5, fp32=31.2, fp8=None,
            source="NVIDIA A10 Tensor Core GPU datasheet (sparse 250/125 halved)"),
    # AWS's GA102 variant: 80 SMs, GeForce-rate tensor math with fp32 accumulate. NVIDIA publishes no
    # A10G datasheet; 70 TFLOP/s bf16 is the figure AWS material and DESIGN.md use, tf32/fp32 = 35 follow
    # from 80 SMs x 128 FP32 lanes at ~1.71 GHz.
    GpuPeak("A10G", ("NVIDIA A10G",), r"\bA10G\b", bf16=70.0, fp16=70.0, tf32=35.0, fp32=35.0, fp8=None,
            source="AWS EC2 G5 (A10G) specifications; no NVIDIA datasheet"),
    # --- Hopper ---
    GpuPeak("H100 SXM", ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB"), r"\bH100\b",
            **_HOPPER_SXM, source="NVIDIA H100 Tensor Core GPU datasheet, SXM (sparse 1,979/989 halved)"),
    GpuPeak("H100 PCIe", ("NVIDIA H100 PCIe",), r"\bH100\b.*\bPCIE\b",
            bf16=756.5, fp16=756.5, tf32=378.0, fp32=51.0, fp8=1513.0,
            source="NVIDIA H100 Tensor Core GPU datasheet, PCIe (sparse 1,513/756 halved)"),
    GpuPeak("H100 NVL", ("NVIDIA H100 NVL",), r"\bH100\b.*\bNVL\b", **_HOPPER_NVL,
            source="NVIDIA H100 Tensor Core GPU datasheet, H100 NVL per GPU (sparse 1,671/835 halved)"),
    GpuPeak("H200 SXM", ("NVIDIA H200", "NVIDIA H200 141GB HBM3e"), r"\bH200\b", **_HOPPER_SXM,
            source="NVIDIA H200 Tensor Core GPU datasheet, SXM (sparse 1,979/989 halved)"),
    GpuPeak("H200 NVL", ("NVIDIA H200 NVL",), r"\bH200\b.*\bNVL\b", **_HOPPER_NVL,
            source="NVIDIA H200 Tensor Core GPU datasheet, NVL (sparse 1,671/835 halved)"),
    GpuPeak("GH200", ("NVIDIA GH200 480GB", "NVIDIA GH200 144G HBM3e"), r"\bGH200\b", **_HOPPER_SXM,
            source="NVIDIA GH200 Grace Hopper Superchip datasheet (sparse 1,979/989 halved)"),
    # Export-limited Hopper; NVIDIA's published H20 figures are already dense.
    GpuPeak("H20", ("NVIDIA H20",), r"\bH20\b", bf16=148.0, fp16=148.0, tf32=74.0, fp32=44.0, fp8=296.0,
            source="NVIDIA HGX H20 product specifications (dense)"),
    # --- Ada data center ---
    GpuPeak("L4", ("NVIDIA L4",), r"\bL4\b", bf16=121.0, fp16=121.0, tf32=60.0, fp32=30.3, fp8=242.5,
            source="NVIDIA L4 Tensor Core GPU datasheet (sparse 242/120/485 halved)"),
    GpuPeak("L40S", ("NVIDIA L40S",), r"\bL40S\b", bf16=362.05, fp16=362.05, tf32=183.0, fp32=91.6,
            fp8=733.0, source="NVIDIA L40S GPU datasheet (dense column)"),
    GpuPeak("L40", ("NVIDIA L40",), r"\bL40\b", bf16=181.05, fp16=181.05, tf32=90.5, fp32=90.5, fp8=362.0,
            source="NVIDIA L40 GPU datasheet (dense column)"),
    # --- Turing / Volta: no bf16 or tf32 tensor path ---
    GpuPeak("T4", ("Tesla T4", "NVIDIA T4"), r"\bT4\b", bf16=None, fp16=65.0, tf32=None, fp32=8.1, fp8=None,
            source="NVIDIA T4 Tensor Core GPU datasheet (mixed precision FP16/FP32)"),
    GpuPeak("V100 SXM2", ("Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"), r"\bV100\b",
            bf16=None, fp16=125.0, tf32=None, fp32=15.7, fp8=None,
            source="NVIDIA V100 Tensor Core GPU datasheet, SXM2"),
    GpuPeak("V100 PCIe", ("Tesla V100-PCIE-16GB", "Tesla V100-PCIE-32GB"), r"\bV100-PCIE\b",
            bf16=None, fp16=112.0, tf32=None, fp32=14.0, fp8=None,
            source="NVIDIA V100 Tensor Core GPU datasheet, PCIe"),
    GpuPeak("V100S PCIe", ("Tesla V100S-PCIE-32GB",), r"\bV100S\b",
            bf16=None, fp16=130.0, tf32=None, fp32=16.4, fp8=None,
            source="NVIDIA V100S datasheet, PCIe"),
    # --- GeForce: fp16/bf16 with fp32 accumulate at half the fp16-accumulate rate ---
    # No whitepaper table for GA106: GA102's per-SM rates (whitepaper Appendix A) x 28 SMs at 1777 MHz.
    GpuPeak("RTX 3060", ("NVIDIA GeForce RTX 3060",), r"\bRTX 3060\b(?!\s*(?:Ti|Laptop)\b)",
            bf16=25.5, fp16=25.5, tf32=12.7, fp32=12.7, fp8=None,
            source="NVIDIA Ampere GA102 whitepaper per-SM rates x RTX 3060 specs (28 SMs, 1777 MHz)"),
    GpuPeak("RTX 3090", ("NVIDIA GeForce RTX 3090",), r"\bRTX 3090\b(?!\s*(?:Ti|Laptop)\b)",
            bf16=71.0, fp16=71.0, tf32=35.6, fp32=35.6, fp8=None,
            source="NVIDIA Ampere GA102 GPU Architecture whitepaper, Appendix A (fp32 accumulate)"),
    GpuPeak("RTX 4090", ("NVIDIA GeForce RTX 4090",), r"\bRTX 4090\b(?!\s*(?:D|Laptop)\b)",
            bf16=165.2, fp16=165.2, tf32=82.6, fp32=82.6, fp8=330.3,
            source="NVIDIA Ada GPU Architecture whitepaper, Appendix (fp32 accumulate)"),
    GpuPeak("RTX 5090", ("NVIDIA GeForce RTX 5090",), r"\bRTX 5090\b(?!\s*(?:D|Laptop)\b)",
            bf16=209.5, fp16=209.5, tf32=104.8, fp32=104.8, fp8=419.0,
            source="NVIDIA RTX Blackwell GPU Architecture whitepaper (fp32 accumulate)"),
    # --- Blackwell data center ---
    GpuPeak("B200", ("NVIDIA B200",), r"\bB200\b", bf16=2250.0, fp16=2250.0, tf32=1100.0, fp32=75.0,
            fp8=4500.0, source="NVIDIA HGX B200 datasheet, per GPU (sparse 4.5/2.2/9 PFLOPS halved)"),
    GpuPeak("GB200", ("NVIDIA GB200",), r"\bGB200\b", bf16=2500.0, fp16=2500.0, tf32=1250.0, fp32=80.0,
            fp8=5000.0, source="NVIDIA GB200 NVL72 datasheet, per GPU (sparse 5/2.5/10 PFLOPS halved)"),
)

_COMPILED = tuple(
    (entry, re.compile(entry.pattern, re.IGNORECASE)) for entry in PEAK_TABLE if entry.pattern
)


def _canonical(name: str) -> str:
    text = " ".join(name.split()).casefold()
    return text.removeprefix("nvidia ")


_EXACT = {_canonical(n): entry for entry in PEAK_TABLE for n in entry.nvml_names}


def lookup_gpu(name: str | None) -> PeakMatch | None:
    """The table entry for a GPU name: exact name first, then the pattern covering most of the name."""
    if not name or not name.strip():
        return None
    exact = _EXACT.get(_canonical(name))
    if exact is not None:
        return PeakMatch(exact, "exact", name.strip())
    text = " ".join(name.split())
    best: tuple[int, GpuPeak, str] | None = None
    for entry, regex in _COMPILED:
        match = regex.search(text)
        if match and (best is None or len(match.group(0)) > best[0]):
            best = (len(match.group(0)), entry, entry.pattern or "")
    if best is None:
        return None
    return PeakMatch(best[1], "pattern", best[2])


def peak_flops(gpu_name: str | None, dtype: str) -> PeakFlops | None:
    """Dense peak FLOP/s for this GPU and dtype, or None when the GPU or its dtype path is unknown."""
    key = normalize_dtype(dtype)
    match = lookup_gpu(gpu_name)
    if key is None or match is None or gpu_name is None:  # a match has a name
        return None
    tflops = match.entry.tflops(key)
    if tflops is None:
        return None
    return PeakFlops(
        flops_per_s=tflops * TERA,
        dtype=key,
        source=f"gputop's table: {match.describe(gpu_name)}; {match.entry.source}",
    )


def user_peak(tflops: float, dtype: str) -> PeakFlops:
    """A peak the user passed with --peak-tflops."""
    return PeakFlops(flops_per_s=tflops * TERA, dtype=normalize_dtype(dtype) or dtype,
                     source="--peak-tflops")
