"""probes.models.peaks: every table entry found by its NVML names, the substring traps, and dense figures."""

from __future__ import annotations

import pytest

from probes.models.peaks import DTYPES, PEAK_TABLE, lookup_gpu, normalize_dtype, peak_flops, user_peak

ALL_NAMES = [(entry, name) for entry in PEAK_TABLE for name in entry.nvml_names]


def test_table_covers_the_gpus_people_train_on():
    models = {entry.model for entry in PEAK_TABLE}
    assert len(models) >= 20
    for wanted in ("A100 SXM4 40GB", "A100 SXM4 80GB", "A100 PCIe 40GB", "A100 PCIe 80GB", "H100 SXM",
                   "H100 PCIe", "H100 NVL", "H200 SXM", "H200 NVL", "GH200", "H20", "L4", "L40S", "A10",
                   "A10G", "T4", "V100 SXM2", "RTX 3060", "RTX 3090", "RTX 4090", "RTX 5090", "B200", "GB200"):
        assert wanted in models


@pytest.mark.parametrize(("entry", "name"), ALL_NAMES, ids=[name for _, name in ALL_NAMES])
def test_every_nvml_name_finds_its_entry(entry, name):
    match = lookup_gpu(name)
    assert match is not None and match.entry is entry and match.how == "exact"
    # the same name with other spacing, case, or without the "NVIDIA " prefix older drivers omit
    variant = "  " + name.upper().removeprefix("NVIDIA ") + " "
    assert lookup_gpu(variant).entry is entry


@pytest.mark.parametrize("entry", [e for e in PEAK_TABLE if e.pattern], ids=lambda e: e.model)
def test_patterns_do_not_steal_other_entries_names(entry):
    """A name listed exactly must also resolve to its own entry when matched by pattern alone."""
    for name in entry.nvml_names:
        best = _pattern_only(name)
        assert best is not None and best.model == entry.model, (name, best and best.model)


def _pattern_only(name):
    import re

    candidates = []
    for entry in PEAK_TABLE:
        if entry.pattern and (m := re.search(entry.pattern, name, re.IGNORECASE)):
            candidates.append((len(m.group(0)), entry))
    return max(candidates, key=lambda c: c[0])[1] if candidates else None


@pytest.mark.parametrize(
    ("name", "model"),
    [
        # H20 ⊂ H200 ⊂ GH200
        ("NVIDIA H20", "H20"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA GH200 96GB HBM3", "GH200"),  # not listed exactly: the pattern must not pick H200
        ("NVIDIA H200 NVL", "H200 NVL"),
        ("NVIDIA H20 96GB", "H20"),
        # L4 ⊂ L40 ⊂ L40S
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L40", "L40"),
        # A10 ⊂ A100 / A10G
        ("NVIDIA A10", "A10"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
        ("NVIDIA A100-SXM4-64GB", "A100 SXM4 40GB"),  # an unlisted A100: same figures as every A100
        # B200 ⊂ GB200
        ("NVIDIA B200", "B200"),
        ("NVIDIA GB200", "GB200"),
        # variants only a pattern knows
        ("NVIDIA H100 PCIe 94GB", "H100 PCIe"),
        ("Tesla V100-PCIE-32GB", "V100 PCIe"),
        ("Tesla V100S-PCIE-32GB", "V100S PCIe"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ],
)
def test_substring_traps(name, model):
    assert lookup_gpu(name).entry.model == model


@pytest.mark.parametrize("name", ["NVIDIA GeForce RTX 3060 Ti", "NVIDIA GeForce RTX 3090 Ti",
                                  "NVIDIA GeForce RTX 4090 D", "NVIDIA GeForce RTX 4090 Laptop GPU",
                                  "NVIDIA A40", "NVIDIA H800", "NVIDIA RTX A1000", "NVIDIA T400 4GB",
                                  "NVIDIA L40G", "AMD Instinct MI300X", "", None])
def test_unknown_or_different_chips_are_not_guessed(name):
    assert lookup_gpu(name) is None
    assert peak_flops(name, "bf16") is None


def test_design_facts_dense_bf16():
    # DESIGN.md's "Peak dense bf16 TFLOP/s" list, sparsity halved where the vendor quotes it
    expected = {"NVIDIA A100-SXM4-80GB": 312, "NVIDIA H100 80GB HBM3": 989.5, "NVIDIA H200": 989.5,
                "NVIDIA H100 PCIe": 756.5, "NVIDIA L4": 121, "NVIDIA L40S": 362.05, "NVIDIA A10G": 70,
                "NVIDIA GeForce RTX 4090": 165.2}
    for name, tflops in expected.items():
        assert peak_flops(name, "bf16").flops_per_s == pytest.approx(tflops * 1e12), name


def test_dtype_columns_and_missing_paths():
    h200 = lookup_gpu("NVIDIA H200").entry
    assert (h200.tflops("bfloat16"), h200.tflops("tf32"), h200.tflops("float32"), h200.tflops("fp8")) == (
        989.5, 494.5, 67.0, 1979.0)
    assert peak_flops("Tesla T4", "bf16") is None  # Turing has no bf16 tensor path
    assert peak_flops("Tesla T4", "fp16").flops_per_s == pytest.approx(65e12)
    assert peak_flops("NVIDIA A100-SXM4-80GB", "fp8") is None
    assert normalize_dtype("torch.bfloat16") == "bf16"
    assert normalize_dtype("int8") is None


def test_figures_are_consistent():
    for entry in PEAK_TABLE:
        values = {d: entry.tflops(d) for d in DTYPES}
        assert any(v for v in values.values()), entry.model
        assert all(v is None or v > 0 for v in values.values()), entry.model
        assert entry.source, entry.model
        tensor = values["bf16"] or values["fp16"]
        assert tensor > values["fp32"], entry.model  # tensor cores beat plain FMA everywhere
        if values["tf32"] is not None:
            assert values["tf32"] < tensor, entry.model
        if values["fp8"] is not None:
            assert values["fp8"] > tensor, entry.model


def test_source_says_where_the_number_comes_from():
    assert "H200" in peak_flops("NVIDIA H200", "bf16").source
    by_pattern = peak_flops("NVIDIA GH200 96GB HBM3", "bf16").source
    assert "GH200, the closest entry to 'NVIDIA GH200 96GB HBM3' (not an exact name in the table)" in by_pattern
    given = user_peak(500, "bf16")
    assert (given.flops_per_s, given.source) == (500e12, "--peak-tflops")


@pytest.mark.parametrize("entry", [e for e in PEAK_TABLE if e.pattern], ids=lambda e: e.model)
def test_no_pattern_text_reaches_a_peaks_source(entry):
    name = f"{entry.model} (a board the table does not list)"
    peak = peak_flops(name, "bf16") or peak_flops(name, "fp16")
    if peak is not None and "closest entry" in peak.source:
        assert entry.pattern not in peak.source
        assert not any(mark in peak.source for mark in ("\\b", "(?", "\\s", ".*"))
