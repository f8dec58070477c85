"""The GPU metrics NVML's GPM reads beyond the basics (Hopper and newer), one row each: the `GpuDevice` field it
fills, pynvml's metric constant, its words on the GPU pane, and its Prometheus name and help.

Adding one is a field of `GpuDevice` (probes/frame.py, in the row's unit, None where the GPU or driver does not give
it) and a row here: the NVML sensor (probes/sensors/nvml.py) asks for every row, the pane (tui/panes/gpu.py) and
the exporter (probes/outputs/exporter.py) show every row, and tests/unit/test_gpu_metrics.py fails until the two agree.
A metric the diagnosis reads is also averaged into `GpuSummary` (probes/diagnosis/gpu_summary.py).

A row carries its unit: a percentage (a share of time or of a peak) is shown as "12%" and exported as a 0-1
`_ratio`; a rate (PCIe or NVLink traffic, which GPM gives in MiB/s: `nvml_scale` turns it into bytes) is kept in
bytes per second, shown as "1.2 GiB/s" and exported as `_bytes_per_second`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

GpmUnit = Literal["percent", "bytes_per_second"]
PERCENT: Final[GpmUnit] = "percent"
BYTES_PER_SECOND: Final[GpmUnit] = "bytes_per_second"
# GPM gives PCIe and NVLink traffic in MiB/s (nvml.h); gputop keeps bytes, as it does for memory.
MIB: Final = 1024.0**2

# The GPU pane's lines of GPM metrics, in order, each with its heading: what the SMs do, which of their pipes
# work, and the traffic in and out of the GPU over PCIe and over NVLink (a line each, so that each fits in 80
# columns whatever the rates).
GpmPaneLine = Literal["GPM", "pipes", "PCIe", "NVLink"]
PANE_LINES: tuple[GpmPaneLine, ...] = ("GPM", "pipes", "PCIe", "NVLink")


@dataclass(frozen=True)
class GpmMetric:
    field: str  # the GpuDevice attribute, in `unit`
    nvml_constant: str  # the pynvml name of the GPM metric (looked up at run time: an older pynvml lacks some)
    label: str  # on the GPU pane's `pane_line`, after its heading
    prometheus_name: str  # a percentage exported as a 0-1 `_ratio`; a rate as `_bytes_per_second`
    prometheus_help: str
    unit: GpmUnit = PERCENT
    pane_line: GpmPaneLine = "GPM"

    @property
    def nvml_scale(self) -> float:
        """NVML's value times this is the field's value: GPM gives rates in MiB/s, percentages as they are."""
        return MIB if self.unit == BYTES_PER_SECOND else 1.0

    def exported(self, value: float | None) -> float | None:
        """The field's value as Prometheus gets it: a percentage as a 0-1 ratio, a rate as it is."""
        if value is None:
            return None
        return value / 100.0 if self.unit == PERCENT else value


# In the order the pane shows them: activity first, then what bounds it.
GPM_METRICS: tuple[GpmMetric, ...] = (
    GpmMetric("gpm_sm_active_pct", "NVML_GPM_METRIC_SM_UTIL", "SM active",
              "gputop_gpu_sm_active_ratio", "Share of time the SMs were active (GPM)"),
    GpmMetric("gpm_sm_occupancy_pct", "NVML_GPM_METRIC_SM_OCCUPANCY", "occupancy",
              "gputop_gpu_sm_occupancy_ratio", "SM warp occupancy (GPM)"),
    GpmMetric("gpm_tensor_active_pct", "NVML_GPM_METRIC_ANY_TENSOR_UTIL", "tensor",
              "gputop_gpu_tensor_active_ratio", "Share of time a tensor pipe was busy (GPM)"),
    GpmMetric("gpm_dram_bw_pct", "NVML_GPM_METRIC_DRAM_BW_UTIL", "DRAM bw",
              "gputop_gpu_dram_bandwidth_ratio", "DRAM bandwidth used, of the peak (GPM)"),
    # Non-tensor math, by precision: NVML's share of time the SMs did it. FP32 busy while the tensor pipes idle is
    # fp32 math that bf16 tensor cores would run (probes/diagnosis/gpu_limit.py).
    GpmMetric("gpm_fp16_active_pct", "NVML_GPM_METRIC_FP16_UTIL", "fp16",
              "gputop_gpu_fp16_pipe_active_ratio", "Share of time the SMs did non-tensor FP16 math (GPM)",
              pane_line="pipes"),
    GpmMetric("gpm_fp32_active_pct", "NVML_GPM_METRIC_FP32_UTIL", "fp32",
              "gputop_gpu_fp32_pipe_active_ratio", "Share of time the SMs did non-tensor FP32 math (GPM)",
              pane_line="pipes"),
    GpmMetric("gpm_fp64_active_pct", "NVML_GPM_METRIC_FP64_UTIL", "fp64",
              "gputop_gpu_fp64_pipe_active_ratio", "Share of time the SMs did non-tensor FP64 math (GPM)",
              pane_line="pipes"),
    # Traffic over the tick (rx: into this GPU, tx: out of it), NVLink summed over its links.
    GpmMetric("gpm_pcie_rx_bytes_per_s", "NVML_GPM_METRIC_PCIE_RX_PER_SEC", "rx",
              "gputop_gpu_pcie_rx_bytes_per_second", "PCIe traffic into the GPU (GPM)",
              unit=BYTES_PER_SECOND, pane_line="PCIe"),
    GpmMetric("gpm_pcie_tx_bytes_per_s", "NVML_GPM_METRIC_PCIE_TX_PER_SEC", "tx",
              "gputop_gpu_pcie_tx_bytes_per_second", "PCIe traffic out of the GPU (GPM)",
              unit=BYTES_PER_SECOND, pane_line="PCIe"),
    GpmMetric("gpm_nvlink_rx_bytes_per_s", "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", "rx",
              "gputop_gpu_nvlink_rx_bytes_per_second", "NVLink traffic into the GPU, all links (GPM)",
              unit=BYTES_PER_SECOND, pane_line="NVLink"),
    GpmMetric("gpm_nvlink_tx_bytes_per_s", "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", "tx",
              "gputop_gpu_nvlink_tx_bytes_per_second", "NVLink traffic out of the GPU, all links (GPM)",
              unit=BYTES_PER_SECOND, pane_line="NVLink"),
)
