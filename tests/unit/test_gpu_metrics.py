"""The GPM metric registry (probes/gpu_metrics.py) and its companions agree: every `gpm_*` field of GpuDevice has a
row and every row a field; the NVML sensor asks for each row's constant, the GPU pane shows each row's label and
value in its unit, and the exporter exports each row, a percentage as its ratio and a rate in bytes per second. Adding
a metric to one place and not the other fails here."""

from __future__ import annotations

import dataclasses

import pytest

from probes.frame import GpuDevice
from probes.gpu_metrics import GPM_METRICS
from probes.outputs.exporter import _Families, _gpu_metrics
from probes.sensors import nvml
from tui.panes.gpu import device_text


def test_every_gpm_field_of_gpu_device_has_a_row_and_every_row_a_field():
    fields = {field.name for field in dataclasses.fields(GpuDevice) if field.name.startswith("gpm_")}
    assert fields == {metric.field for metric in GPM_METRICS}


def test_names_are_unique_and_prometheus_names_follow_the_unit():
    for attribute in ("field", "nvml_constant", "prometheus_name"):
        values = [getattr(metric, attribute) for metric in GPM_METRICS]
        assert len(set(values)) == len(values), attribute
    shown = [(metric.pane_line, metric.label) for metric in GPM_METRICS]  # "rx" under PCIe and under NVLink
    assert len(set(shown)) == len(shown)
    suffix = {"percent": ("_pct", "_ratio"), "bytes_per_second": ("_bytes_per_s", "_bytes_per_second")}
    for metric in GPM_METRICS:
        field_end, prometheus_end = suffix[metric.unit]
        assert metric.field.endswith(field_end), metric
        assert metric.prometheus_name.startswith("gputop_gpu_") and metric.prometheus_name.endswith(prometheus_end)


def test_the_pipes_and_traffic_hopper_gives_are_rows():
    constants = {metric.nvml_constant: metric.unit for metric in GPM_METRICS}
    for pipe in ("FP16", "FP32", "FP64"):
        assert constants[f"NVML_GPM_METRIC_{pipe}_UTIL"] == "percent"
    for rate in ("PCIE_RX_PER_SEC", "PCIE_TX_PER_SEC", "NVLINK_TOTAL_RX_PER_SEC", "NVLINK_TOTAL_TX_PER_SEC"):
        assert constants[f"NVML_GPM_METRIC_{rate}"] == "bytes_per_second"
    # GPM gives traffic in MiB/s (nvml.h); the fields hold bytes.
    assert {metric.nvml_scale for metric in GPM_METRICS if metric.unit == "bytes_per_second"} == {2.0**20}
    assert {metric.nvml_scale for metric in GPM_METRICS if metric.unit == "percent"} == {1.0}


def test_the_sensor_asks_for_every_row():
    assert nvml._GPM_METRICS == tuple((metric.field, metric.nvml_constant, metric.nvml_scale)
                                      for metric in GPM_METRICS)


def device_with_every_metric() -> GpuDevice:
    # A distinct value per metric, so a row shown with another row's value fails too; rates in GiB/s.
    values = {metric.field: (11.0 + index) * (1.0 if metric.unit == "percent" else 2.0**30)
              for index, metric in enumerate(GPM_METRICS)}
    return GpuDevice(index=0, name="NVIDIA H200", uuid="GPU-0", **values)


def test_the_pane_shows_every_row_with_its_value_in_its_unit():
    text = device_text(device_with_every_metric(), []).plain
    lines = {line.split(":")[0].strip(): line for line in text.splitlines()}
    for index, metric in enumerate(GPM_METRICS):
        shown = f"{11 + index}%" if metric.unit == "percent" else f"{11 + index}.0 GiB/s"
        assert f"{metric.label} {shown}" in lines[metric.pane_line]
    # A GPU that gives only the first four (a recording from before the pipes and traffic were read) shows the
    # one line it showed then, and no empty heading.
    device = GpuDevice(index=0, name="NVIDIA H200", gpm_sm_active_pct=95.0, gpm_sm_occupancy_pct=28.0,
                       gpm_tensor_active_pct=64.0, gpm_dram_bw_pct=29.0)
    assert device_text(device, []).plain.splitlines()[2:] == [
        " GPM: SM active 95% · occupancy 28% · tensor 64% · DRAM bw 29%"]


def test_the_pane_keeps_every_gpm_line_within_80_columns():
    # The pane's border and padding take a few columns of an 80-column terminal.
    for line in device_text(device_with_every_metric(), []).plain.splitlines():
        assert len(line) <= 76, line


def test_the_exporter_exports_every_row_in_its_unit():
    families = _Families()
    _gpu_metrics(families, device_with_every_metric(), "node1")
    exported = {family.name: family for family in families}
    for index, metric in enumerate(GPM_METRICS):
        family = exported[metric.prometheus_name.removesuffix("_total")]
        assert family.documentation.startswith(metric.prometheus_help)
        value = (11 + index) / 100 if metric.unit == "percent" else (11 + index) * 2.0**30
        assert [sample.value for sample in family.samples] == [pytest.approx(value)]
