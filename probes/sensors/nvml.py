"""The GPU probe: every NVIDIA GPU's clocks, power, utilisation, memory, clock event reasons, compute
processes, (Hopper and newer) GPM metrics and the machine's own faults (ECC, row remapping, retired pages, PCIe
replays, NVLink errors), read through NVML once per tick, the faults at most every FAULT_READ_INTERVAL_S.

This is the only module in gputop that touches NVML (nvidia-ml-py, imported as ``pynvml``). It imports it
lazily, initialises it on the first read, and never raises: a machine without a driver or a GPU gives
``GpuReading(available=False, reason=...)``, and a field one GPU or driver cannot report is None while the
other fields of the tick stay intact.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from probes.frame import GpuDevice, GpuProcess, GpuReading
from probes.gpu_metrics import GPM_METRICS
from probes.sensors.kernel_log import normalise_pci_bus_id

# A driver can be installed or loaded while gputop runs; asking again is cheap but not free.
INIT_RETRY_INTERVAL_S = 30.0

# NVML's answers that mean no NVIDIA GPU is usable here, each the reason a GpuReading carries, and its few words
# for the one short line a headless run says on a machine without a GPU (probes/doctor.py), where the full reason
# and its fix would fill three lines of every run with nothing to fix.
NO_LIBRARY = "NVML library not found (no NVIDIA driver on this machine: libnvidia-ml.so.1 is missing)"
NO_DRIVER = "NVIDIA driver not loaded (NVML is installed, but the kernel module is not running)"
NO_DEVICE = "no NVIDIA GPU visible (the driver is loaded but NVML lists no device)"
NO_GPU_SHORT_REASONS = {NO_LIBRARY: "libnvidia-ml.so.1 not found", NO_DRIVER: "the driver is not loaded",
                        NO_DEVICE: "it lists no device"}

# NVML computes GPM metrics only between samples taken at least this far apart.
GPM_MIN_SAMPLE_INTERVAL_S = 0.1

# Clock event reason bits, by the suffix of their pynvml constant, and the stable name gputop reports.
# The "ClocksEventReason" constants replaced the deprecated "ClocksThrottleReason" ones (same bits);
# an older nvidia-ml-py defines only the latter, and either may lack the newest reasons.
_CLOCK_EVENT_REASONS = (
    ("GpuIdle", "gpu_idle"),
    ("ApplicationsClocksSetting", "applications_clocks_setting"),
    ("SwPowerCap", "sw_power_cap"),
    ("HwSlowdown", "hw_slowdown"),
    ("SyncBoost", "sync_boost"),
    ("SwThermalSlowdown", "sw_thermal_slowdown"),
    ("HwThermalSlowdown", "hw_thermal_slowdown"),
    ("HwPowerBrakeSlowdown", "hw_power_brake_slowdown"),
    ("DisplayClockSetting", "display_clock_setting"),
    ("BoardLimit", "board_limit"),
    ("Reliability", "reliability"),
)
CLOCK_EVENT_REASONS: tuple[str, ...] = tuple(name for _, name in _CLOCK_EVENT_REASONS)  # the names, in bit order

# The machine's own faults (ECC counts, row remapping, retired pages, PCIe replays, NVLink errors) are cumulative
# counters and flags that change rarely, and reading them is not free: NVLink alone is 4 counters per active link,
# 18 links on a Hopper board, near 600 NVML calls a tick on an 8-GPU node. They are read at most this often, the last
# values carried in between.
FAULT_READ_INTERVAL_S = 10.0
_QUIET_STATIC = frozenset({"pci_info", "ecc_mode"})  # static facts of the faults: missing is not news

# NVLink data-link error counters summed into GpuDevice.nvlink_errors: replays, recoveries, CRC errors (flits, data).
_NVLINK_ERROR_COUNTERS = ("NVML_NVLINK_ERROR_DL_REPLAY", "NVML_NVLINK_ERROR_DL_RECOVERY",
                          "NVML_NVLINK_ERROR_DL_CRC_FLIT", "NVML_NVLINK_ERROR_DL_CRC_DATA")

# GpuDevice field <- pynvml GPM metric constant, times the scale to the field's unit, for every metric of the registry.
_GPM_METRICS = tuple((metric.field, metric.nvml_constant, metric.nvml_scale) for metric in GPM_METRICS)


def decode_clock_event_reasons(nvml: Any, mask: int) -> tuple[str, ...]:
    """The active reasons in an NVML clock event bitmask, lowest bit first; unnamed bits as unknown_0x..."""
    names = []
    named_bits = 0
    for suffix, name in _CLOCK_EVENT_REASONS:
        bit = getattr(nvml, "nvmlClocksEventReason" + suffix, None)
        if bit is None:
            bit = getattr(nvml, "nvmlClocksThrottleReason" + suffix, None)
        if bit is None:
            continue
        named_bits |= bit
        if mask & bit:
            names.append((bit, name))
    unnamed = mask & ~named_bits
    bit = 1
    while unnamed:
        if unnamed & bit:
            names.append((bit, f"unknown_{bit:#x}"))
            unnamed &= ~bit
        bit <<= 1
    return tuple(name for _, name in sorted(names))


def _text(value: Any) -> str | None:
    """NVML strings: str from current nvidia-ml-py, bytes from old versions."""
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def gpu_names(nvml: Any = None) -> list[str]:
    """Every GPU's name as NVML reports it ("NVIDIA H200"), in index order; [] when there is no driver,
    no nvidia-ml-py or no GPU. Never raises. nvml: a module with pynvml's API (tests pass a fake)."""
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return []
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception:  # any NVML failure means the same here: no GPU name to offer
        return []
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(index) for index in range(nvml.nvmlDeviceGetCount())]
        return [name for name in (_text(nvml.nvmlDeviceGetName(handle)) for handle in handles) if name]
    except Exception:
        return []
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


@dataclass
class _GpmState:
    """One device's pair of GPM sample buffers; ``previous`` holds the sample the next metrics start from."""

    previous: Any
    current: Any
    previous_taken_at: float | None = None
    last_metrics: dict[str, float | None] = field(default_factory=dict)


@dataclass
class _DeviceState:
    """What the probe remembers about one device between ticks."""

    index: int
    handle: Any
    static: dict[str, Any] = field(default_factory=dict)  # name, uuid, max SM clock: read once
    gpm_supported: bool | None = None  # None: not asked yet
    gpm: _GpmState | None = None
    # (function name, *arguments) NVML said it does not support here (or, for the faults, forbids or lacks): what a
    # GPU or driver does not support does not change while NVML stays initialised, so it is not asked again.
    unsupported: set[tuple[Any, ...]] = field(default_factory=set)
    nvlinks: tuple[int, ...] | None = None  # the active NVLinks, read once; None: not asked yet
    faults: dict[str, Any] = field(default_factory=dict)  # the last fault read, carried between reads
    faults_read_at: float | None = None


class _FieldErrors:
    """Per-device failures of one tick, grouped by message, for GpuReading.reason."""

    def __init__(self) -> None:
        self.by_device: dict[int, dict[str, list[str]]] = {}

    def add(self, index: int, field_name: str, exc: BaseException) -> None:
        message = str(exc) or type(exc).__name__
        self.by_device.setdefault(index, {}).setdefault(message, []).append(field_name)

    def lines(self) -> list[str]:
        return [
            f"GPU {index}: {message} ({', '.join(fields)})"
            for index, by_message in sorted(self.by_device.items())
            for message, fields in by_message.items()
        ]


class NvmlGpuProbe:
    """Reads every GPU NVML can see, once per ``read()``; see the module docstring."""

    def __init__(self, nvml: Any = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        """nvml: a module with pynvml's API (tests pass a fake); None imports pynvml on first read.

        clock: monotonic seconds, for the init retry and GPM sample spacing (tests pass a fake clock).
        """
        self._nvml = nvml
        self._clock = clock
        self._initialized = False
        self._last_init_attempt: float | None = None
        self._unavailable = GpuReading(available=False, reason="NVML not initialised yet")
        self._driver_version: str | None = None
        self._devices: list[_DeviceState] = []

    # --- public API --------------------------------------------------------------------------------

    def read(self, target_pids: Mapping[int, int] | None = None) -> GpuReading:
        """One reading of every device. target_pids maps a PID as NVML may report it to its local PID."""
        try:
            if not self._initialized and not self._try_init():
                return self._unavailable
            return self._read_devices(target_pids or {})
        # A probe never raises into the UI: whatever broke (a bug, a driver oddity) becomes the reason.
        except Exception as exc:
            return GpuReading(available=False, reason=f"NVML read failed: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        """Free GPM sample buffers and shut NVML down; a later read() initialises it again."""
        if not self._initialized:
            return
        for device in self._devices:
            self._free_gpm_samples(device)
        self._devices = []
        self._guarded(self._nvml.nvmlShutdown)
        self._initialized = False
        self._last_init_attempt = None

    # --- initialisation ----------------------------------------------------------------------------

    def _try_init(self) -> bool:
        now = self._clock()
        if self._last_init_attempt is not None and now - self._last_init_attempt < INIT_RETRY_INTERVAL_S:
            return False
        self._last_init_attempt = now
        reason = self._init()
        if reason is not None:
            self._unavailable = GpuReading(available=False, reason=reason)
            return False
        self._initialized = True
        return True

    def _init(self) -> str | None:
        """Initialise NVML and find the devices; the reason it cannot, or None."""
        if self._nvml is None:
            try:
                import pynvml
            except ImportError:
                return "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
            self._nvml = pynvml
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            return self._init_failure_reason(exc)
        try:
            count = nvml.nvmlDeviceGetCount()
            handles = [nvml.nvmlDeviceGetHandleByIndex(index) for index in range(count)]
        except nvml.NVMLError as exc:
            self._guarded(nvml.nvmlShutdown)
            return f"NVML could not list the GPUs: {exc}"
        if not handles:
            self._guarded(nvml.nvmlShutdown)
            return NO_DEVICE
        self._devices = [_DeviceState(index=index, handle=handle) for index, handle in enumerate(handles)]
        self._driver_version = _text(self._guarded(nvml.nvmlSystemGetDriverVersion))
        return None

    def _init_failure_reason(self, exc: Exception) -> str:
        nvml = self._nvml
        if isinstance(exc, nvml.NVMLError_LibraryNotFound):
            return NO_LIBRARY
        if isinstance(exc, nvml.NVMLError_DriverNotLoaded):
            return NO_DRIVER
        if isinstance(exc, nvml.NVMLError_NoPermission):
            return "no permission to use NVML (check access to /dev/nvidia*)"
        mismatch = getattr(nvml, "NVMLError_LibRmVersionMismatch", None)
        if mismatch is not None and isinstance(exc, mismatch):
            return "NVML and the loaded NVIDIA driver differ in version (driver updated without a reboot?)"
        return f"NVML could not initialise: {exc}"

    # --- one tick ----------------------------------------------------------------------------------

    def _read_devices(self, target_pids: Mapping[int, int]) -> GpuReading:
        errors = _FieldErrors()
        devices = tuple(self._read_device(device, target_pids, errors) for device in self._devices)
        notes = errors.lines()
        no_gpm = [str(device.index) for device in self._devices if device.gpm_supported is False]
        if no_gpm:
            notes.append(f"GPM metrics not supported on GPU {', '.join(no_gpm)} (they need Hopper or newer)")
        return GpuReading(
            available=True,
            reason="; ".join(notes) or None,
            driver_version=self._driver_version,
            devices=devices,
        )

    def _call(
        self, device: _DeviceState, errors: _FieldErrors, field_name: str, function_name: str, *args: Any,
        quiet: bool = False,
    ) -> Any:
        """One guarded per-device NVML read: None when the function, the driver or the GPU lacks it; what the GPU
        does not support is remembered and not asked again. quiet: no permission and a driver without the function
        count as not supported too (the fault counters: missing is normal, not news)."""
        nvml = self._nvml
        function = getattr(nvml, function_name, None)
        key = (function_name, *args)
        if function is None or key in device.unsupported:
            return None
        unsupported: tuple[type[BaseException], ...] = (nvml.NVMLError_NotSupported,)
        if quiet:
            unsupported += (nvml.NVMLError_NoPermission, nvml.NVMLError_FunctionNotFound)
        try:
            return function(device.handle, *args)
        except unsupported:
            device.unsupported.add(key)
            return None
        except nvml.NVMLError as exc:
            errors.add(device.index, field_name, exc)
            return None

    def _read_device(
        self, device: _DeviceState, target_pids: Mapping[int, int], errors: _FieldErrors
    ) -> GpuDevice:
        nvml = self._nvml
        static = device.static
        for key, function_name, args in (
            ("name", "nvmlDeviceGetName", ()),
            ("uuid", "nvmlDeviceGetUUID", ()),
            ("max_sm_clock", "nvmlDeviceGetMaxClockInfo", (nvml.NVML_CLOCK_SM,)),
            ("power_constraints", "nvmlDeviceGetPowerManagementLimitConstraints", ()),  # [min, max] in mW
            ("pci_info", "nvmlDeviceGetPciInfo", ()),
            ("ecc_mode", "nvmlDeviceGetEccMode", ()),  # [current, pending]
        ):
            if static.get(key) is None:
                static[key] = self._call(device, errors, key, function_name, *args, quiet=key in _QUIET_STATIC)

        sm_clock = self._call(device, errors, "sm_clock", "nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_SM)
        power_mw = self._call(device, errors, "power", "nvmlDeviceGetPowerUsage")
        limit_mw = self._call(device, errors, "power_limit", "nvmlDeviceGetEnforcedPowerLimit")
        utilization = self._call(device, errors, "utilization", "nvmlDeviceGetUtilizationRates")
        memory = self._call(device, errors, "memory", "nvmlDeviceGetMemoryInfo")
        temperature = self._call(
            device, errors, "temperature", "nvmlDeviceGetTemperature", nvml.NVML_TEMPERATURE_GPU
        )
        reasons = self._clock_event_reasons(device, errors)
        processes = self._processes(device, errors, target_pids)
        gpm: dict[str, Any] = self._gpm_metrics(device, errors)
        faults = self._faults(device, errors)

        return GpuDevice(
            index=device.index,
            name=_text(static["name"]),
            uuid=_text(static["uuid"]),
            sm_clock_mhz=sm_clock,
            max_sm_clock_mhz=static["max_sm_clock"],
            power_w=None if power_mw is None else power_mw / 1000.0,
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            power_max_limit_w=_max_limit_w(static["power_constraints"]),
            util_gpu_pct=None if utilization is None else float(utilization.gpu),
            util_mem_pct=None if utilization is None else float(utilization.memory),
            mem_used_bytes=None if memory is None else int(memory.used),
            mem_total_bytes=None if memory is None else int(memory.total),
            temperature_c=None if temperature is None else float(temperature),
            clock_event_reasons=reasons,
            processes=processes,
            in_target=any(process.in_target for process in processes),
            pci_bus_id=_pci_bus_id(static["pci_info"]),
            **gpm,
            **faults,
        )

    def _clock_event_reasons(self, device: _DeviceState, errors: _FieldErrors) -> tuple[str, ...] | None:
        """Decoded reasons; drivers before 535 (and old nvidia-ml-py) only know the throttle-reasons call."""
        nvml = self._nvml
        for function_name in (
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
        ):
            function = getattr(nvml, function_name, None)
            if function is None or (function_name,) in device.unsupported:
                continue
            try:
                return decode_clock_event_reasons(nvml, function(device.handle))
            except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
                device.unsupported.add((function_name,))
                continue
            except nvml.NVMLError as exc:
                errors.add(device.index, "clock_event_reasons", exc)
                return None
        return None

    def _processes(
        self, device: _DeviceState, errors: _FieldErrors, target_pids: Mapping[int, int]
    ) -> tuple[GpuProcess, ...]:
        nvml = self._nvml
        # The unversioned call needs the driver's _v3 symbol and says so with NVMLLibraryMismatchError
        # (not an NVMLError); a driver older than 510 has only _v2.
        library_mismatch = getattr(nvml, "NVMLLibraryMismatchError", ())
        try:
            infos = self._call(device, errors, "processes", "nvmlDeviceGetComputeRunningProcesses")
        except library_mismatch:
            infos = self._call(device, errors, "processes", "nvmlDeviceGetComputeRunningProcesses_v2")
        processes = []
        for info in infos or ():
            used = info.usedGpuMemory  # None when NVML cannot tell (NVML_VALUE_NOT_AVAILABLE)
            pid = int(info.pid)
            local_pid = target_pids.get(pid)
            processes.append(
                GpuProcess(
                    pid=pid,
                    used_memory_bytes=None if used is None else int(used),
                    in_target=local_pid is not None,
                    local_pid=local_pid,
                )
            )
        return tuple(processes)

    # --- the machine's own faults ------------------------------------------------------------------

    def _faults(self, device: _DeviceState, errors: _FieldErrors) -> dict[str, Any]:
        """The GpuDevice fault fields, read at most every FAULT_READ_INTERVAL_S; None where the GPU does not count
        them (ECC off, row remapping before Ampere, retired pages from Ampere on, no NVLink)."""
        now = self._clock()
        if device.faults_read_at is not None and now - device.faults_read_at < FAULT_READ_INTERVAL_S:
            return device.faults
        device.faults_read_at = now
        nvml = self._nvml

        def read(field_name: str, function_name: str, *args: Any) -> Any:
            return self._call(device, errors, field_name, function_name, *args, quiet=True)

        ecc_mode = device.static.get("ecc_mode")
        ecc_off = ecc_mode is not None and ecc_mode[0] != nvml.NVML_FEATURE_ENABLED

        def ecc(error_type: int, counter_type: int) -> int | None:
            return None if ecc_off else read("ecc", "nvmlDeviceGetTotalEccErrors", error_type, counter_type)

        uncorrected, corrected = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
        remap = read("remapped_rows", "nvmlDeviceGetRemappedRows")  # (correctable, uncorrectable, pending, failed)
        retired = [read("retired_pages", "nvmlDeviceGetRetiredPages", cause) for cause in (
            nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
            nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)]
        pending = read("retired_pages", "nvmlDeviceGetRetiredPagesPendingStatus")
        device.faults = dict(
            ecc_uncorrected_volatile=ecc(uncorrected, nvml.NVML_VOLATILE_ECC),
            ecc_uncorrected_aggregate=ecc(uncorrected, nvml.NVML_AGGREGATE_ECC),
            ecc_corrected_volatile=ecc(corrected, nvml.NVML_VOLATILE_ECC),
            remapped_rows_uncorrectable=None if remap is None else int(remap[1]),
            remap_pending=None if remap is None else bool(remap[2]),
            remap_failed=None if remap is None else bool(remap[3]),
            retired_pages=None if None in retired else sum(len(pages) for pages in retired),
            retired_pages_pending=None if pending is None else pending == nvml.NVML_FEATURE_ENABLED,
            pcie_replays=read("pcie_replays", "nvmlDeviceGetPcieReplayCounter"),
            nvlink_errors=self._nvlink_errors(device, errors),
        )
        return device.faults

    def _nvlink_errors(self, device: _DeviceState, errors: _FieldErrors) -> int | None:
        """The data-link errors of every active NVLink, summed; None with no active link or a counter not read."""
        nvml = self._nvml
        if device.nvlinks is None:  # which links are up, read once; past the GPU's own links NVML answers an error
            state = getattr(nvml, "nvmlDeviceGetNvLinkState", None)
            links = range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18) if state is not None else 0)
            device.nvlinks = tuple(link for link in links if state is not None
                                   and self._guarded(state, device.handle, link) == nvml.NVML_FEATURE_ENABLED)
        counters = [getattr(nvml, name) for name in _NVLINK_ERROR_COUNTERS if hasattr(nvml, name)]
        total, counted = 0, False
        for link in device.nvlinks:
            for counter in counters:
                value = self._call(device, errors, "nvlink_errors", "nvmlDeviceGetNvLinkErrorCounter", link, counter,
                                   quiet=True)
                if value is not None:
                    total, counted = total + int(value), True
                elif ("nvmlDeviceGetNvLinkErrorCounter", link, counter) not in device.unsupported:
                    return None  # a counter failed this time: no partial sum that would look like fewer errors
        return total if counted else None

    # --- GPM ---------------------------------------------------------------------------------------

    def _gpm_metrics(self, device: _DeviceState, errors: _FieldErrors) -> dict[str, float | None]:
        """This tick's GPM metrics (GpuDevice field -> value): computed between the previous tick's sample
        and one taken now, so the first tick after start (or after a failed sample) has none."""
        nvml = self._nvml
        empty: dict[str, float | None] = {name: None for name, _, _ in _GPM_METRICS}
        if device.gpm_supported is None:
            device.gpm_supported = self._query_gpm_support(device)
        gpm = device.gpm
        if not device.gpm_supported or gpm is None:  # supported: its two sample buffers are allocated
            return empty
        now = self._clock()
        if gpm.previous_taken_at is not None and now - gpm.previous_taken_at < GPM_MIN_SAMPLE_INTERVAL_S:
            # Too soon for NVML to compute anything new: the last interval's values still describe now.
            return {**empty, **gpm.last_metrics}
        try:
            nvml.nvmlGpmSampleGet(device.handle, gpm.current)
        except nvml.NVMLError_NotSupported:
            # e.g. MIG mode on the device: it will not start working on its own, so stop asking.
            self._free_gpm_samples(device)
            device.gpm_supported = False
            return empty
        except nvml.NVMLError as exc:
            errors.add(device.index, "gpm_sample", exc)
            gpm.previous_taken_at = None
            gpm.last_metrics = {}
            return empty
        metrics: dict[str, float | None] = {}
        if gpm.previous_taken_at is not None:
            try:
                metrics = self._metrics_between(gpm.previous, gpm.current)
            except nvml.NVMLError as exc:
                errors.add(device.index, "gpm_metrics", exc)
        gpm.previous, gpm.current = gpm.current, gpm.previous
        gpm.previous_taken_at = now
        gpm.last_metrics = metrics
        return {**empty, **metrics}

    def _query_gpm_support(self, device: _DeviceState) -> bool:
        """Whether GPM works on the device; allocates its two sample buffers when it does."""
        nvml = self._nvml
        if not all(hasattr(nvml, name) for name in ("nvmlGpmQueryDeviceSupport", "c_nvmlGpmMetricsGet_t")):
            return False
        try:
            if not nvml.nvmlGpmQueryDeviceSupport(device.handle).isSupportedDevice:
                return False
        except nvml.NVMLError:
            return False
        samples = []
        try:
            samples.append(nvml.nvmlGpmSampleAlloc())
            samples.append(nvml.nvmlGpmSampleAlloc())
        except nvml.NVMLError:
            for sample in samples:
                self._guarded(nvml.nvmlGpmSampleFree, sample)
            return False
        device.gpm = _GpmState(previous=samples[0], current=samples[1])
        return True

    def _metrics_between(self, sample1: Any, sample2: Any) -> dict[str, float | None]:
        nvml = self._nvml
        wanted = [(name, getattr(nvml, constant, None), scale) for name, constant, scale in _GPM_METRICS]
        wanted = [(name, metric_id, scale) for name, metric_id, scale in wanted if metric_id is not None]
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(wanted)
        request.sample1 = sample1
        request.sample2 = sample2
        for slot, (_, metric_id, _) in enumerate(wanted):
            request.metrics[slot].metricId = metric_id
        nvml.nvmlGpmMetricsGet(request)
        result: dict[str, float | None] = {}
        for slot, (name, _, scale) in enumerate(wanted):
            metric = request.metrics[slot]
            result[name] = float(metric.value) * scale if metric.nvmlReturn == nvml.NVML_SUCCESS else None
        return result

    def _free_gpm_samples(self, device: _DeviceState) -> None:
        if device.gpm is not None:
            for sample in (device.gpm.previous, device.gpm.current):
                self._guarded(self._nvml.nvmlGpmSampleFree, sample)
            device.gpm = None

    # --- helpers -----------------------------------------------------------------------------------

    def _guarded(self, function: Callable[..., Any], *args: Any) -> Any:
        """Call an NVML function whose failure changes nothing for the user (cleanup, optional facts)."""
        try:
            return function(*args)
        except self._nvml.NVMLError:
            return None


def read_once(target_pids: Mapping[int, int] | None = None, nvml: Any = None) -> GpuReading:
    """One reading of every GPU, NVML initialised for it and shut down after: for what reads the GPUs now and then,
    not each tick (the record of the machine a check ran on, whether a GPU is free yet). Never raises; a field a GPU
    or driver does not give is None, as in every reading. nvml: a module with pynvml's API (tests pass a fake)."""
    probe = NvmlGpuProbe(nvml)
    try:
        return probe.read(target_pids)
    finally:
        probe.close()


def for_target(reading: GpuReading, target_pids: Mapping[int, int]) -> GpuReading:
    """One reading of the node's GPUs, with each compute process marked in or out of one target's tree.

    target_pids maps a PID as NVML may report it to its local PID (ProcessTreeProbe.pid_aliases()). Lets
    several targets share a single NVML read per tick (`gputop serve --follow`): read once, mark per target.
    """
    if not reading.available:
        return reading
    devices = []
    for device in reading.devices:
        processes = tuple(dataclasses.replace(p, in_target=p.pid in target_pids, local_pid=target_pids.get(p.pid))
                          for p in device.processes)
        devices.append(dataclasses.replace(device, processes=processes,
                                           in_target=any(p.in_target for p in processes)))
    return dataclasses.replace(reading, devices=tuple(devices))


class SharedGpuReading:
    """One NVML read per tick for many targets: refresh() reads every GPU once; read(target_pids) hands each
    target that reading, marked for it (for_target). Quacks like NvmlGpuProbe for the Engine."""

    def __init__(self, probe: NvmlGpuProbe | None = None) -> None:
        self._probe = probe if probe is not None else NvmlGpuProbe()
        self.latest = GpuReading(available=False, reason="NVML not read yet")

    def refresh(self) -> GpuReading:
        self.latest = self._probe.read()
        return self.latest

    def read(self, target_pids: Mapping[int, int] | None = None) -> GpuReading:
        return for_target(self.latest, target_pids or {})

    def close(self) -> None:
        self._probe.close()


# --- what NVML can report here (gputop doctor) ---------------------------------------------------------


@dataclass(frozen=True)
class GpuCapability:
    """What one GPU lets gputop read beyond the basic counters. None: NVML could not say."""

    index: int
    name: str | None
    gpm_supported: bool | None  # GPM (SM active, occupancy, tensor, DRAM): Hopper and newer, not under MIG
    clock_event_reasons_supported: bool | None  # why the clocks are held down (power cap, thermal, ...)


@dataclass(frozen=True)
class NvmlCapabilities:
    """Whether NVML works here, the driver, and each GPU's capabilities; ``reason`` says why not."""

    available: bool
    reason: str | None = None
    driver_version: str | None = None
    gpus: tuple[GpuCapability, ...] = ()


def nvml_capabilities(nvml: Any = None) -> NvmlCapabilities:
    """Initialise NVML once, ask what each GPU supports, shut down. Never raises.

    nvml: a module with pynvml's API (tests pass a fake); None imports pynvml."""
    probe = NvmlGpuProbe(nvml)
    try:
        reason = probe._init()
        if reason is not None:
            return NvmlCapabilities(available=False, reason=reason)
        nvml = probe._nvml
        gpus = []
        for device in probe._devices:
            name = _text(probe._guarded(nvml.nvmlDeviceGetName, device.handle))
            gpus.append(GpuCapability(
                index=device.index,
                name=name,
                gpm_supported=_gpm_supported(nvml, device.handle),
                clock_event_reasons_supported=_clock_event_reasons_supported(nvml, device.handle),
            ))
        return NvmlCapabilities(available=True, driver_version=probe._driver_version, gpus=tuple(gpus))
    except Exception as exc:  # a driver oddity or a bug: said, never raised
        return NvmlCapabilities(available=False, reason=f"NVML query failed: {type(exc).__name__}: {exc}")
    finally:
        if probe._devices:
            probe._guarded(probe._nvml.nvmlShutdown)


def _gpm_supported(nvml: Any, handle: Any) -> bool | None:
    if not hasattr(nvml, "nvmlGpmQueryDeviceSupport"):
        return False  # an nvidia-ml-py too old to know GPM
    try:
        return bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
        return False
    except nvml.NVMLError:
        return None


def _clock_event_reasons_supported(nvml: Any, handle: Any) -> bool | None:
    """The same two calls, in the same order, as the probe's per-tick read."""
    answer: bool | None = False
    for function_name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        function = getattr(nvml, function_name, None)
        if function is None:
            continue
        try:
            function(handle)
            return True
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
            continue
        except nvml.NVMLError:
            answer = None
    return answer


def _pci_bus_id(info: Any) -> str | None:
    """The GPU's PCI address in NVML's form ("00000000:3B:00.0", as kernel_log gives the Xid lines') from
    nvmlDeviceGetPciInfo (busId; busIdLegacy, "0000:3b:00.0", where busId is empty); None where it was not read."""
    if info is None:
        return None
    return normalise_pci_bus_id(getattr(info, "busId", None)) or normalise_pci_bus_id(
        getattr(info, "busIdLegacy", None))


def _max_limit_w(constraints: Any) -> float | None:
    """The board's maximum power limit in watts from nvmlDeviceGetPowerManagementLimitConstraints' [min, max] in
    milliwatts; None where it was not read."""
    try:
        return float(constraints[1]) / 1000.0 if constraints is not None else None
    except (TypeError, IndexError, ValueError):
        return None
