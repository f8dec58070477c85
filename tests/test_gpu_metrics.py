"""The GPM metric registry (probes/gpu_metrics.py) and its companions agree: every `gpm_*` field of GpuDevice has a
row and every row a field; the NVML sensor asks for each row's constant, the GPU pane shows each row's label and
value, and the exporter exports each row as its ratio. Adding a metric to one place and not the other fails here."""

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


def test_names_are_unique_and_prometheus_ratios():
    for attribute in ("field", "nvml_constant", "label", "prometheus_name"):
        values = [getattr(metric, attribute) for metric in GPM_METRICS]
        assert len(set(values)) == len(values), attribute
    assert all(metric.prometheus_name.startswith("gputop_gpu_") and metric.prometheus_name.endswith("_ratio")
               for metric in GPM_METRICS)


def test_the_sensor_asks_for_every_row():
    assert nvml._GPM_METRICS == tuple((metric.field, metric.nvml_constant) for metric in GPM_METRICS)


def device_with_every_metric() -> GpuDevice:
    # A distinct value per metric, so a row shown with another row's value fails too.
    values = {metric.field: 11.0 + index for index, metric in enumerate(GPM_METRICS)}
    return GpuDevice(index=0, name="NVIDIA H200", uuid="GPU-0", **values)


def test_the_pane_shows_every_row_with_its_value():
    text = device_text(device_with_every_metric(), []).plain
    for index, metric in enumerate(GPM_METRICS):
        assert f"{metric.label} {11 + index}%" in text


def test_the_exporter_exports_every_row_as_a_ratio():
    families = _Families()
    _gpu_metrics(families, device_with_every_metric(), "node1")
    exported = {family.name: family for family in families}
    for index, metric in enumerate(GPM_METRICS):
        family = exported[metric.prometheus_name.removesuffix("_total")]
        assert family.documentation.startswith(metric.prometheus_help)
        assert [sample.value for sample in family.samples] == [pytest.approx((11 + index) / 100)]
