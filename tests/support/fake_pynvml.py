"""A stand-in for nvidia-ml-py (``pynvml``) for machines without an NVIDIA GPU: tests drive the GPU probe
through it with the same calls, constants and return shapes the real module has.

Honesty rules, so the fake cannot drift from the real module:
- constants, error classes and ctypes structures are the real module's own objects, re-exported;
- results are built the way the real functions build them (``c_nvmlUtilization_t``, ``c_nvmlMemory_t``,
  process objects from ``nvmlStructToFriendlyObject`` with ``usedGpuMemory`` None when not available,
  GPM samples as ``c_nvmlGpmSample_t`` pointers, metrics written into a real ``c_nvmlGpmMetricsGet_t``);
- errors are raised the way the real module raises them (``NVMLError(code)`` picks the subclass), calls
  before ``nvmlInit`` fail with ``NVMLError_Uninitialized``, and a function the "driver" lacks fails with
  ``NVMLError_FunctionNotFound`` (the unversioned compute-processes call with ``NVMLLibraryMismatchError``);
- every ``nvml*`` method's signature is the real function's (tests/unit/test_nvml.py checks this).
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from dataclasses import dataclass, field

import pynvml as _real

from probes.gpu_metrics import GPM_METRICS

GIB = 1024**3

# Names re-exported from the real module, by prefix, plus the structures results are built from.
_REEXPORT_PREFIXES = ("NVML_", "NVMLError", "nvmlClocksEventReason", "nvmlClocksThrottleReason")
_REEXPORT_NAMES = (
    "NVMLLibraryMismatchError",
    "c_nvmlGpmMetricsGet_t",
    "c_nvmlGpmSample_t",
    "c_nvmlGpmSupport_t",
    "c_nvmlMemory_t",
    "c_nvmlUtilization_t",
    "c_nvmlProcessInfo_v2_t",
    "nvmlPciInfo_t",
)
REEXPORTED = tuple(
    sorted(name for name in dir(_real) if name.startswith(_REEXPORT_PREFIXES)) + list(_REEXPORT_NAMES)
)

# What an nvidia-ml-py from before the "clock event" rename (12.535 and older) lacks.
OLD_PYNVML_LACKS = frozenset(
    {"nvmlDeviceGetCurrentClocksEventReasons"}
    | {name for name in dir(_real) if name.startswith("nvmlClocksEventReason")}
)


@dataclass
class FakeGpu:
    """One GPU's state; change attributes between reads to simulate a changing device.

    Defaults look like a busy H200. Power and limits are in milliwatts, as NVML reports them.
    """

    name: str = "NVIDIA H200"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    sm_clock_mhz: int = 1980
    max_sm_clock_mhz: int = 1980
    power_mw: int = 690_000
    power_limit_mw: int = 700_000
    power_max_limit_mw: int | None = 700_000  # the board's maximum limit; None: not supported
    util_gpu: int = 100
    util_memory: int = 62
    mem_used: int = 80 * GIB
    mem_total: int = 143_771 * 1024**2  # what NVML reports for an H200's 141 GB
    temperature_c: int = 64
    clock_event_reasons: int = 0  # bitmask of nvmlClocksEventReason*
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid as NVML sees it, bytes)
    gpm_supported: bool = True
    # GPM metric id -> value over the interval that ends with the next sample taken (nvmlGpmSampleGet);
    # metrics between two samples further apart average the intervals in between.
    gpm_metrics: dict[int, float] = field(default_factory=dict)
    # The machine's own faults. None: the GPU does not report it (the call raises NVML_ERROR_NOT_SUPPORTED).
    pci_bus_id: str | None = "00000000:18:00.0"  # nvmlDeviceGetPciInfo().busId, NVML's form
    ecc_enabled: bool | None = True  # nvmlDeviceGetEccMode's current mode; the counts are not supported when off
    # (NVML_MEMORY_ERROR_TYPE_*, NVML_VOLATILE_ECC / NVML_AGGREGATE_ECC) -> count; absent: 0
    ecc_counts: dict[tuple[int, int], int] = field(default_factory=dict)
    # nvmlDeviceGetRemappedRows: (correctable rows, uncorrectable rows, pending, failed); None before Ampere
    remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0)
    # nvmlDeviceGetRetiredPages: NVML_PAGE_RETIREMENT_CAUSE_* -> page addresses; None from Ampere on (as here)
    retired_pages: dict[int, list[int]] | None = None
    retired_pages_pending: bool = False
    pcie_replays: int | None = 0
    nvlink_links: int | None = 18  # how many NVLinks the GPU has (an H200 SXM: 18); None: no NVLink
    nvlink_down: set[int] = field(default_factory=set)  # links that are not active
    nvlink_error_counts: dict[tuple[int, int], int] = field(default_factory=dict)  # (link, counter) -> count
    # NVML function name -> error code it raises for this GPU, e.g. {"nvmlDeviceGetPowerUsage":
    # NVML_ERROR_NOT_SUPPORTED}.
    errors: dict[str, int] = field(default_factory=dict)


def gpm_values(**by_field: float) -> dict[int, float]:
    """GPM values as NVML gives them (metric id -> value in NVML's unit, MiB/s for traffic), from GpuDevice fields
    in gputop's units: ``FakeGpu(gpm_metrics=gpm_values(gpm_tensor_active_pct=64.0, gpm_pcie_rx_bytes_per_s=2e9))``."""
    rows = {metric.field: metric for metric in GPM_METRICS}
    return {getattr(_real, rows[name].nvml_constant): value / rows[name].nvml_scale for name, value in by_field.items()}


# A GPU doing each kind of work probes/diagnosis/gpu_limit.py names, as GPM reads it (gputop's units), with the
# utilisation and power NVML gives beside it. tensor_core_bound and busy_outside_tensor_cores are the real H200 runs'
# means (tests/fixtures/h200: gpt2xl_s2 and seed004_a_rec); the others are constructed, with the figures each class
# is named by.
INSIDE_GPU: dict[str, dict[str, float]] = {
    "tensor_core_bound": dict(gpm_sm_active_pct=94.9, gpm_sm_occupancy_pct=27.6, gpm_tensor_active_pct=63.5,
                              gpm_dram_bw_pct=29.5),
    "busy_outside_tensor_cores": dict(gpm_sm_active_pct=81.2, gpm_sm_occupancy_pct=33.1, gpm_tensor_active_pct=29.9,
                                      gpm_dram_bw_pct=40.8),
    # Elementwise and norm kernels: DRAM near what a kernel can move, tensor pipes mostly idle.
    "memory_bound": dict(gpm_sm_active_pct=88.0, gpm_sm_occupancy_pct=60.0, gpm_tensor_active_pct=6.0,
                         gpm_dram_bw_pct=78.0, gpm_fp32_active_pct=12.0, gpm_fp16_active_pct=3.0),
    # Matmuls in fp32 without TF32: the FP32 pipe busy, the tensor pipes idle.
    "fp32_math": dict(gpm_sm_active_pct=92.0, gpm_sm_occupancy_pct=40.0, gpm_tensor_active_pct=0.5,
                      gpm_dram_bw_pct=25.0, gpm_fp32_active_pct=68.0, gpm_fp16_active_pct=0.0),
    # Small kernels one after another: a kernel runs nearly all the time, few SMs at work.
    "launch_bound": dict(gpm_sm_active_pct=12.0, gpm_sm_occupancy_pct=4.0, gpm_tensor_active_pct=2.0,
                         gpm_dram_bw_pct=5.0),
}
# Utilisation (%) and power (mW) beside each: launch-bound work draws little power at high util.
INSIDE_GPU_UTIL_POWER: dict[str, tuple[int, int]] = {
    "tensor_core_bound": (100, 691_000),
    "busy_outside_tensor_cores": (95, 688_000),
    "memory_bound": (100, 520_000),
    "fp32_math": (100, 610_000),
    "launch_bound": (97, 180_000),
}


@dataclass(frozen=True)
class _FakeDeviceHandle:
    """Stands for a c_nvmlDevice_t: opaque to callers."""

    index: int


@dataclass
class _SampleRecord:
    gpu_index: int
    sequence: int  # order of nvmlGpmSampleGet calls, across all GPUs


class FakeNvml:
    """A configurable pynvml: ``FakeNvml([FakeGpu(), FakeGpu()])``.

    init_error: an NVML_ERROR_* code nvmlInit raises (set it to None later: the driver came back).
    driver_lacks: NVML C functions the "installed driver" lacks (an old driver).
    module_lacks: attribute names missing from the module itself (an old nvidia-ml-py).
    calls: every nvml* call made, as (function name, GPU index or None), for tests to inspect.
    """

    def __init__(
        self,
        gpus: Iterable[FakeGpu] = (),
        *,
        init_error: int | None = None,
        driver_version: str = "570.124.06",
        driver_lacks: Iterable[str] = (),
        module_lacks: Iterable[str] = (),
    ) -> None:
        self.gpus = list(gpus)
        self.init_error = init_error
        self.driver_version = driver_version
        self.driver_lacks = set(driver_lacks)
        self.module_lacks = frozenset(module_lacks)
        self.calls: list[tuple[str, int | None]] = []
        self.init_count = 0  # NVML's reference count: nvmlInit adds one, nvmlShutdown takes one
        self._sample_buffers: dict[int, ctypes.c_uint64] = {}  # address -> buffer kept alive
        self._samples_taken: dict[int, _SampleRecord] = {}  # buffer address -> the sample it holds now
        self._sample_sequence = 0
        # Per GPU, (sequence, metrics of the interval ending at that sample), for every sample ever taken:
        # metrics between two samples average every interval in between, as counters would.
        self._gpm_history: dict[int, list[tuple[int, dict[int, float]]]] = {}

    def __getattribute__(self, name: str):
        if name in object.__getattribute__(self, "module_lacks"):
            raise AttributeError(f"module 'pynvml' has no attribute '{name}'")
        return object.__getattribute__(self, name)

    # --- inspection for tests ----------------------------------------------------------------------

    @property
    def live_gpm_samples(self) -> int:
        """GPM sample buffers allocated and not yet freed."""
        return len(self._sample_buffers)

    def call_count(self, function_name: str) -> int:
        return sum(1 for name, _ in self.calls if name == function_name)

    # --- plumbing ----------------------------------------------------------------------------------

    def _enter(self, function_name: str, handle: _FakeDeviceHandle | None = None) -> FakeGpu | None:
        """What every fake function does first, mirroring the real module's checks, in its order."""
        self.calls.append((function_name, None if handle is None else handle.index))
        if self.init_count == 0:
            raise _real.NVMLError(_real.NVML_ERROR_UNINITIALIZED)
        if function_name in self.driver_lacks:
            raise _real.NVMLError(_real.NVML_ERROR_FUNCTION_NOT_FOUND)
        if handle is None:
            return None
        gpu = self.gpus[handle.index]
        if function_name in gpu.errors:
            raise _real.NVMLError(gpu.errors[function_name])
        return gpu

    @staticmethod
    def _sample_address(sample) -> int | None:
        return ctypes.cast(sample, ctypes.c_void_p).value

    # --- library -----------------------------------------------------------------------------------

    def nvmlInit(self):
        self.calls.append(("nvmlInit", None))
        if self.init_error is not None:
            raise _real.NVMLError(self.init_error)
        self.init_count += 1

    def nvmlShutdown(self):
        self._enter("nvmlShutdown")
        self.init_count -= 1

    def nvmlSystemGetDriverVersion(self):
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlDeviceGetCount(self):
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return _FakeDeviceHandle(index)

    # --- device queries ----------------------------------------------------------------------------

    def nvmlDeviceGetName(self, handle):
        return self._enter("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle):
        return self._enter("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetClockInfo(self, handle, type):
        gpu = self._enter("nvmlDeviceGetClockInfo", handle)
        if type != _real.NVML_CLOCK_SM:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.sm_clock_mhz

    def nvmlDeviceGetMaxClockInfo(self, handle, type):
        gpu = self._enter("nvmlDeviceGetMaxClockInfo", handle)
        if type != _real.NVML_CLOCK_SM:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.max_sm_clock_mhz

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._enter("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return self._enter("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle):
        gpu = self._enter("nvmlDeviceGetPowerManagementLimitConstraints", handle)
        if gpu.power_max_limit_mw is None:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        return [200_000, gpu.power_max_limit_mw]

    def nvmlDeviceGetUtilizationRates(self, handle):
        gpu = self._enter("nvmlDeviceGetUtilizationRates", handle)
        return _real.c_nvmlUtilization_t(gpu=gpu.util_gpu, memory=gpu.util_memory)

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        gpu = self._enter("nvmlDeviceGetMemoryInfo", handle)
        if version:
            raise _real.NVMLError(_real.NVML_ERROR_FUNCTION_NOT_FOUND)  # only the v1 struct is faked
        return _real.c_nvmlMemory_t(total=gpu.mem_total, free=gpu.mem_total - gpu.mem_used, used=gpu.mem_used)

    def nvmlDeviceGetTemperature(self, handle, sensor):
        gpu = self._enter("nvmlDeviceGetTemperature", handle)
        if sensor != _real.NVML_TEMPERATURE_GPU:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature_c

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self._enter("nvmlDeviceGetCurrentClocksEventReasons", handle).clock_event_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", handle).clock_event_reasons

    def _process_infos(self, gpu: FakeGpu):
        infos = []
        for pid, used in gpu.processes:
            not_available = _real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
            struct = _real.c_nvmlProcessInfo_v2_t(
                pid=pid, usedGpuMemory=not_available if used is None else used
            )
            info = _real.nvmlStructToFriendlyObject(struct)
            if info.usedGpuMemory == not_available:
                info.usedGpuMemory = None  # as the real module does
            infos.append(info)
        return infos

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        # The real one is the _v3 call wrapped by throwOnVersionMismatch.
        if "nvmlDeviceGetComputeRunningProcesses_v3" in self.driver_lacks:
            self.calls.append(("nvmlDeviceGetComputeRunningProcesses", handle.index))
            raise _real.NVMLLibraryMismatchError(
                "Unversioned function called and the pyNVML version does not match the NVML lib version."
            )
        return self._process_infos(self._enter("nvmlDeviceGetComputeRunningProcesses", handle))

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle):
        return self._process_infos(self._enter("nvmlDeviceGetComputeRunningProcesses_v2", handle))

    # --- the machine's own faults ------------------------------------------------------------------

    @staticmethod
    def _supported(value):
        if value is None:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetPciInfo(self, handle):
        bus_id = self._supported(self._enter("nvmlDeviceGetPciInfo", handle).pci_bus_id)
        domain, bus, rest = bus_id.split(":")
        device, _ = rest.split(".")
        info = _real.nvmlPciInfo_t()
        info.busId = bus_id.encode()
        info.busIdLegacy = f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}.0".encode()
        info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(device, 16)
        return info

    def nvmlDeviceGetEccMode(self, handle):
        enabled = self._supported(self._enter("nvmlDeviceGetEccMode", handle).ecc_enabled)
        mode = _real.NVML_FEATURE_ENABLED if enabled else _real.NVML_FEATURE_DISABLED
        return [mode, mode]

    def nvmlDeviceGetTotalEccErrors(self, handle, errorType, counterType):
        gpu = self._enter("nvmlDeviceGetTotalEccErrors", handle)
        self._supported(gpu.ecc_enabled or None)
        return gpu.ecc_counts.get((errorType, counterType), 0)

    def nvmlDeviceGetRemappedRows(self, device):
        return self._supported(self._enter("nvmlDeviceGetRemappedRows", device).remapped_rows)

    def nvmlDeviceGetRetiredPages(self, device, sourceFilter):
        pages = self._supported(self._enter("nvmlDeviceGetRetiredPages", device).retired_pages)
        return list(pages.get(sourceFilter, []))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device):
        gpu = self._enter("nvmlDeviceGetRetiredPagesPendingStatus", device)
        self._supported(gpu.retired_pages)
        return _real.NVML_FEATURE_ENABLED if gpu.retired_pages_pending else _real.NVML_FEATURE_DISABLED

    def nvmlDeviceGetPcieReplayCounter(self, handle):
        return self._supported(self._enter("nvmlDeviceGetPcieReplayCounter", handle).pcie_replays)

    def _nvlink(self, function_name, device, link):
        gpu = self._enter(function_name, device)
        if self._supported(gpu.nvlink_links) <= link:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        return gpu

    def nvmlDeviceGetNvLinkState(self, device, link):
        gpu = self._nvlink("nvmlDeviceGetNvLinkState", device, link)
        return _real.NVML_FEATURE_DISABLED if link in gpu.nvlink_down else _real.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkErrorCounter(self, device, link, counter):
        return self._nvlink("nvmlDeviceGetNvLinkErrorCounter", device, link).nvlink_error_counts.get((link, counter), 0)

    # --- GPM ---------------------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, device):
        gpu = self._enter("nvmlGpmQueryDeviceSupport", device)
        support = _real.c_nvmlGpmSupport_t()
        support.version = _real.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(gpu.gpm_supported)
        return support

    def nvmlGpmSampleAlloc(self):
        self._enter("nvmlGpmSampleAlloc")
        buffer = ctypes.c_uint64(0)
        self._sample_buffers[ctypes.addressof(buffer)] = buffer
        return ctypes.cast(ctypes.pointer(buffer), _real.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, gpmSample):
        self._enter("nvmlGpmSampleFree")
        address = self._sample_address(gpmSample)
        if address not in self._sample_buffers:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        del self._sample_buffers[address]
        self._samples_taken.pop(address, None)

    def nvmlGpmSampleGet(self, device, gpmSample):
        gpu = self._enter("nvmlGpmSampleGet", device)
        address = self._sample_address(gpmSample)
        if address not in self._sample_buffers:
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        if not gpu.gpm_supported:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        self._sample_sequence += 1
        self._samples_taken[address] = _SampleRecord(device.index, self._sample_sequence)
        history = self._gpm_history.setdefault(device.index, [])
        history.append((self._sample_sequence, dict(gpu.gpm_metrics)))
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet):
        self._enter("nvmlGpmMetricsGet")
        if metricsGet.version != _real.NVML_GPM_METRICS_GET_VERSION:
            raise _real.NVMLError(_real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        first = self._samples_taken.get(self._sample_address(metricsGet.sample1))
        second = self._samples_taken.get(self._sample_address(metricsGet.sample2))
        if (
            first is None
            or second is None
            or first.gpu_index != second.gpu_index
            or second.sequence <= first.sequence
            or not 0 < metricsGet.numMetrics <= _real.NVML_GPM_METRIC_MAX
        ):
            raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
        intervals = [
            metrics
            for sequence, metrics in self._gpm_history[first.gpu_index]
            if first.sequence < sequence <= second.sequence
        ]
        for slot in range(metricsGet.numMetrics):
            metric = metricsGet.metrics[slot]
            if all(metric.metricId in metrics for metrics in intervals):
                metric.value = sum(metrics[metric.metricId] for metrics in intervals) / len(intervals)
                metric.nvmlReturn = _real.NVML_SUCCESS
            else:
                metric.value = 0.0
                metric.nvmlReturn = _real.NVML_ERROR_NOT_SUPPORTED
        return metricsGet


for _name in REEXPORTED:
    setattr(FakeNvml, _name, getattr(_real, _name))
del _name


def two_h200s() -> FakeNvml:
    """Two H200s: one busy with the target (PID 4242, 70 GiB) and a PID NVML gives no memory for, one idle with another
    user's process; the NVML tests' common machine."""
    return FakeNvml(
        [
            FakeGpu(
                uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000",
                pci_bus_id="00000000:18:00.0",
                processes=[(4242, 70 * GIB), (5151, None)],
            ),
            FakeGpu(
                uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000",
                pci_bus_id="00000000:2A:00.0",
                util_gpu=0,
                power_mw=120_500,
                sm_clock_mhz=345,
                clock_event_reasons=_real.nvmlClocksEventReasonGpuIdle,
                processes=[(999, 1 * GIB)],
            ),
        ]
    )
