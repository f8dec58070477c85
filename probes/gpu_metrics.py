"""The GPU metrics NVML's GPM reads beyond the basics (Hopper and newer), one row each: the `GpuDevice` field it
fills, pynvml's metric constant, its words on the GPU pane, and its Prometheus name and help.

Adding one is a field of `GpuDevice` (probes/frame.py, a percentage, None where the GPU or driver does not give
it) and a row here: the NVML sensor (probes/sensors/nvml.py) asks for every row, the pane (tui/panes/gpu.py) and
the exporter (probes/outputs/exporter.py) show every row, and tests/test_gpu_metrics.py fails until the two agree.
A metric the diagnosis reads is also averaged into `GpuSummary` (probes/diagnosis/gpu_summary.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpmMetric:
    field: str  # the GpuDevice attribute, in percent
    nvml_constant: str  # the pynvml name of the GPM metric (looked up at run time: an older pynvml lacks some)
    label: str  # on the GPU pane's "GPM:" line
    prometheus_name: str  # exported as a 0-1 ratio
    prometheus_help: str


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
)
