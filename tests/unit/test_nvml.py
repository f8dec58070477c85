"""The GPU probe (probes/sensors/nvml.py) against a fake pynvml (tests/support/fake_pynvml.py), plus checks that the
fake matches the real nvidia-ml-py, and the real probe with the real pynvml on this machine."""

from __future__ import annotations

import ast
import ctypes
import inspect
import sys
import time
from pathlib import Path

import pynvml
import pytest
from support.fake_pynvml import GIB, OLD_PYNVML_LACKS, REEXPORTED, FakeGpu, FakeNvml, two_h200s

from probes.frame import GpuReading, from_jsonable, to_jsonable
from probes.gpu_metrics import GPM_METRICS
from probes.sensors.nvml import (
    INIT_RETRY_INTERVAL_S,
    NvmlGpuProbe,
    SharedGpuReading,
    decode_clock_event_reasons,
    read_once,
)

REPO = Path(__file__).resolve().parents[2]

SM_UTIL = pynvml.NVML_GPM_METRIC_SM_UTIL
SM_OCCUPANCY = pynvml.NVML_GPM_METRIC_SM_OCCUPANCY
TENSOR = pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
DRAM_BW = pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_probe(fake: FakeNvml) -> tuple[NvmlGpuProbe, FakeClock]:
    clock = FakeClock()
    return NvmlGpuProbe(fake, clock=clock), clock


# --- reading devices ---------------------------------------------------------------------------------


def test_reads_two_h200_like_devices_in_nvml_order():
    fake = two_h200s()
    probe, _ = make_probe(fake)
    reading = probe.read()

    assert reading.available and reading.reason is None
    assert reading.driver_version == "570.124.06"
    first, second = reading.devices
    assert (first.index, second.index) == (0, 1)
    assert first.name == "NVIDIA H200"
    assert first.uuid == "GPU-aaaaaaaa-0000-0000-0000-000000000000"
    assert (first.sm_clock_mhz, first.max_sm_clock_mhz) == (1980, 1980)
    assert (first.power_w, first.power_limit_w) == (690.0, 700.0)
    assert first.power_max_limit_w == 700.0  # the board's maximum (limit constraints): the limit is at it
    assert (first.util_gpu_pct, first.util_mem_pct) == (100.0, 62.0)
    assert (first.mem_used_bytes, first.mem_total_bytes) == (80 * GIB, 143_771 * 1024**2)
    assert first.temperature_c == 64.0
    assert first.clock_event_reasons == ()
    assert (second.sm_clock_mhz, second.power_w, second.util_gpu_pct) == (345, 120.5, 0.0)
    assert second.clock_event_reasons == ("gpu_idle",)
    # GPM needs two samples: the first tick has none.
    assert first.gpm_sm_active_pct is None and first.gpm_tensor_active_pct is None
    probe.close()


def test_static_facts_are_read_once_and_live_ones_every_tick():
    fake = two_h200s()
    probe, clock = make_probe(fake)
    for _ in range(3):
        probe.read()
        clock.now += 1.0
    assert fake.call_count("nvmlInit") == 1
    assert fake.call_count("nvmlDeviceGetName") == 2  # once per device
    assert fake.call_count("nvmlDeviceGetPowerUsage") == 6  # every device, every tick
    probe.close()


def test_target_processes_are_marked_with_their_local_pid():
    probe, _ = make_probe(two_h200s())
    # Inside a container NVML reports host PIDs: 4242 on the host is our 42.
    reading = probe.read(target_pids={4242: 42})
    first, second = reading.devices

    assert first.in_target and not second.in_target
    target, other = first.processes
    assert (target.pid, target.local_pid, target.in_target) == (4242, 42, True)
    assert target.used_memory_bytes == 70 * GIB
    assert (other.pid, other.in_target, other.local_pid) == (5151, False, None)
    assert other.used_memory_bytes is None  # NVML_VALUE_NOT_AVAILABLE
    assert [(p.pid, p.in_target) for p in second.processes] == [(999, False)]

    untargeted = probe.read().devices
    assert not any(device.in_target for device in untargeted)
    probe.close()


def test_a_shared_reading_reads_nvml_once_and_marks_each_targets_own_processes():
    fake = two_h200s()
    probe, clock = make_probe(fake)
    shared = SharedGpuReading(probe)
    assert not shared.read({4242: 42}).available  # nothing read yet
    for _ in range(2):
        shared.refresh()
        clock.now += 1.0
        one, other = shared.read({4242: 42}), shared.read({999: 9})
        assert [d.in_target for d in one.devices] == [True, False]
        assert [(p.pid, p.local_pid) for p in one.devices[0].processes if p.in_target] == [(4242, 42)]
        assert [d.in_target for d in other.devices] == [False, True]
        assert [(p.pid, p.local_pid) for p in other.devices[1].processes if p.in_target] == [(999, 9)]
        assert one.devices[0].power_w == other.devices[0].power_w == 690.0  # the same reading, marked twice
    assert fake.call_count("nvmlDeviceGetPowerUsage") == 4  # two devices, two refreshes: not once per target
    shared.close()
    assert fake.call_count("nvmlShutdown") == 1


def test_a_single_reading_marks_the_target_and_shuts_nvml_down_again():
    fake = two_h200s()
    reading = read_once({4242: 42}, nvml=fake)
    assert reading.available and reading.driver_version == "570.124.06"
    assert [d.in_target for d in reading.devices] == [True, False]
    assert fake.init_count == 0 and fake.live_gpm_samples == 0  # nothing left held between the reads
    broken = FakeNvml([FakeGpu()], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    assert read_once(nvml=broken).reason.startswith("NVIDIA driver not loaded")


def test_unsupported_fields_are_none_and_the_others_intact():
    fake = two_h200s()
    not_supported = pynvml.NVML_ERROR_NOT_SUPPORTED
    fake.gpus[1].errors = {
        "nvmlDeviceGetPowerUsage": not_supported,
        "nvmlDeviceGetEnforcedPowerLimit": not_supported,
        "nvmlDeviceGetTemperature": not_supported,
        "nvmlDeviceGetCurrentClocksEventReasons": not_supported,
        "nvmlDeviceGetCurrentClocksThrottleReasons": not_supported,
    }
    probe, _ = make_probe(fake)
    reading = probe.read()
    first, second = reading.devices

    assert reading.available and reading.reason is None  # "not supported" is normal, not news
    assert (second.power_w, second.power_limit_w, second.temperature_c) == (None, None, None)
    assert second.clock_event_reasons is None
    assert (second.sm_clock_mhz, second.util_gpu_pct, second.mem_total_bytes) == (345, 0.0, 143_771 * 1024**2)
    assert second.name == "NVIDIA H200" and len(second.processes) == 1
    assert first.power_w == 690.0
    probe.close()


def test_other_field_errors_are_none_and_named_in_the_reason():
    fake = two_h200s()
    fake.gpus[0].errors = {
        "nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_NO_PERMISSION,
        "nvmlDeviceGetEnforcedPowerLimit": pynvml.NVML_ERROR_NO_PERMISSION,
        "nvmlDeviceGetComputeRunningProcesses": pynvml.NVML_ERROR_UNKNOWN,
    }
    probe, _ = make_probe(fake)
    reading = probe.read()
    first = reading.devices[0]

    assert reading.available
    assert first.power_w is None and first.power_limit_w is None and first.processes == ()
    assert first.sm_clock_mhz == 1980 and first.util_gpu_pct == 100.0
    assert reading.reason == (
        "GPU 0: Insufficient Permissions (power, power_limit); GPU 0: Unknown Error (processes)"
    )
    probe.close()


def test_a_bug_below_the_probe_becomes_a_reason_not_an_exception():
    fake = two_h200s()

    def broken(handle):
        raise RuntimeError("ctypes went sideways")

    fake.nvmlDeviceGetPowerUsage = broken
    probe, _ = make_probe(fake)
    reading = probe.read()
    assert not reading.available
    assert reading.reason == "NVML read failed: RuntimeError: ctypes went sideways"


def test_reading_round_trips_through_json():
    fake = two_h200s()
    fake.gpus[0].gpm_metrics = {SM_UTIL: 71.5, SM_OCCUPANCY: 40.0, TENSOR: 55.25, DRAM_BW: 30.0}
    probe, clock = make_probe(fake)
    probe.read()
    clock.now += 1.0
    reading = probe.read(target_pids={4242: 42})
    assert from_jsonable(GpuReading, to_jsonable(reading)) == reading
    probe.close()


# --- no library, no driver, no device ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML library not found (no NVIDIA driver on this machine"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "NVIDIA driver not loaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "no permission to use NVML"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "NVML and the loaded NVIDIA driver differ in version"),
        (pynvml.NVML_ERROR_UNKNOWN, "NVML could not initialise: Unknown Error"),
    ],
)
def test_init_failure_gives_unavailable_with_a_reason(error, expected):
    probe, _ = make_probe(FakeNvml([FakeGpu()], init_error=error))
    reading = probe.read()
    assert not reading.available
    assert reading.reason.startswith(expected)
    assert reading.devices == ()
    probe.close()


def test_init_is_retried_at_most_every_30_seconds_and_a_returning_driver_is_used():
    fake = two_h200s()
    fake.init_error = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    probe, clock = make_probe(fake)

    assert not probe.read().available
    clock.now += INIT_RETRY_INTERVAL_S - 1
    assert not probe.read().available
    assert fake.call_count("nvmlInit") == 1

    fake.init_error = None  # the driver was loaded
    assert not probe.read().available  # still inside the retry interval
    clock.now += 1
    reading = probe.read()
    assert reading.available and len(reading.devices) == 2
    assert fake.call_count("nvmlInit") == 2
    probe.close()
    assert fake.init_count == 0


def test_no_device_gives_unavailable_and_releases_nvml():
    fake = FakeNvml([])
    probe, _ = make_probe(fake)
    reading = probe.read()
    assert not reading.available
    assert reading.reason.startswith("no NVIDIA GPU visible")
    assert fake.init_count == 0


def test_missing_pynvml_gives_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    reading = NvmlGpuProbe().read()
    assert not reading.available
    assert "nvidia-ml-py is not installed" in reading.reason


def test_real_pynvml_on_a_machine_without_a_driver_is_unavailable_and_does_not_raise():
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        pass
    else:
        pytest.skip("this machine has an NVIDIA driver; test_real_gpu covers it")
    probe = NvmlGpuProbe()
    reading = probe.read()
    assert not reading.available
    assert reading.reason.startswith("NVML library not found")
    assert not probe.read().available  # the retry interval holds: no second attempt, no exception
    probe.close()


def test_real_gpu():
    """On a machine with an NVIDIA driver: the real probe reads every GPU, and GPM where supported."""
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        pytest.skip("no NVIDIA driver on this machine")
    probe = NvmlGpuProbe()
    try:
        first = probe.read()
        assert first.available, first.reason
        assert first.driver_version and first.devices
        for device in first.devices:
            assert device.name and device.uuid and device.mem_total_bytes
            assert device.sm_clock_mhz is not None and device.clock_event_reasons is not None
        time.sleep(0.5)
        second = probe.read()
        print(second)
        for device in second.devices:
            gpm = (device.gpm_sm_active_pct, device.gpm_sm_occupancy_pct, device.gpm_tensor_active_pct)
            assert all(value is None or 0.0 <= value <= 100.0 for value in gpm), device
            if device.name.startswith(("NVIDIA H100", "NVIDIA H200")):  # Hopper: GPM must work
                assert None not in gpm, (device, second.reason)
    finally:
        probe.close()


# --- clock event reasons -----------------------------------------------------------------------------


def test_clock_event_reason_bits_decode_to_stable_names():
    assert decode_clock_event_reasons(pynvml, 0) == ()
    assert decode_clock_event_reasons(pynvml, pynvml.nvmlClocksEventReasonGpuIdle) == ("gpu_idle",)
    mask = pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwSlowdown
    assert decode_clock_event_reasons(pynvml, mask) == ("sw_power_cap", "hw_slowdown")
    assert decode_clock_event_reasons(pynvml, pynvml.nvmlClocksEventReasonAll) == (
        "gpu_idle",
        "applications_clocks_setting",
        "sw_power_cap",
        "hw_slowdown",
        "sync_boost",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "display_clock_setting",
    )
    unknown_bit = 1 << 40
    assert decode_clock_event_reasons(pynvml, unknown_bit | pynvml.nvmlClocksEventReasonSyncBoost) == (
        "sync_boost",
        "unknown_0x10000000000",
    )


def test_old_driver_without_clock_event_reasons_falls_back_to_throttle_reasons():
    fake = two_h200s()
    fake.driver_lacks = {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetComputeRunningProcesses_v3"}
    fake.gpus[0].clock_event_reasons = pynvml.nvmlClocksThrottleReasonSwThermalSlowdown
    probe, _ = make_probe(fake)
    reading = probe.read(target_pids={4242: 42})
    first = reading.devices[0]

    assert first.clock_event_reasons == ("sw_thermal_slowdown",)
    assert fake.call_count("nvmlDeviceGetCurrentClocksThrottleReasons") == 2
    # A driver without the _v3 process call: the _v2 call still finds the target.
    assert first.in_target and [p.pid for p in first.processes] == [4242, 5151]
    assert fake.call_count("nvmlDeviceGetComputeRunningProcesses_v2") == 2
    assert reading.reason is None
    probe.close()


def test_old_pynvml_without_clock_event_names_falls_back_to_throttle_names():
    fake = FakeNvml(
        [FakeGpu(clock_event_reasons=pynvml.nvmlClocksThrottleReasonSwPowerCap)],
        module_lacks=OLD_PYNVML_LACKS,
    )
    assert not hasattr(fake, "nvmlClocksEventReasonSwPowerCap")
    probe, _ = make_probe(fake)
    assert probe.read().devices[0].clock_event_reasons == ("sw_power_cap",)
    assert fake.call_count("nvmlDeviceGetCurrentClocksEventReasons") == 0
    probe.close()


# --- GPM ---------------------------------------------------------------------------------------------


def test_gpm_metrics_come_from_two_samples_and_samples_are_freed_on_close():
    fake = two_h200s()
    gpu = fake.gpus[0]
    gpu.gpm_metrics = {SM_UTIL: 71.5, SM_OCCUPANCY: 40.0, TENSOR: 55.25, DRAM_BW: 30.0}
    probe, clock = make_probe(fake)

    first = probe.read().devices[0]
    assert first.gpm_sm_active_pct is None  # one sample so far
    assert fake.live_gpm_samples == 4  # two buffers per device, reused every tick

    clock.now += 1.0
    second = probe.read().devices[0]
    assert (second.gpm_sm_active_pct, second.gpm_sm_occupancy_pct) == (71.5, 40.0)
    assert (second.gpm_tensor_active_pct, second.gpm_dram_bw_pct) == (55.25, 30.0)

    gpu.gpm_metrics = {SM_UTIL: 12.0, SM_OCCUPANCY: 5.0, TENSOR: 0.0, DRAM_BW: 88.0}
    clock.now += 1.0
    third = probe.read().devices[0]
    assert (third.gpm_sm_active_pct, third.gpm_tensor_active_pct, third.gpm_dram_bw_pct) == (12.0, 0.0, 88.0)
    assert fake.live_gpm_samples == 4

    probe.close()
    assert fake.live_gpm_samples == 0
    assert fake.init_count == 0


def test_gpm_ticks_closer_than_nvml_allows_keep_the_last_values():
    fake = FakeNvml([FakeGpu(gpm_metrics={SM_UTIL: 50.0, SM_OCCUPANCY: 20.0, TENSOR: 30.0, DRAM_BW: 10.0})])
    probe, clock = make_probe(fake)
    probe.read()
    clock.now += 1.0
    probe.read()
    samples_taken = fake.call_count("nvmlGpmSampleGet")
    clock.now += 0.05
    again = probe.read().devices[0]
    assert again.gpm_sm_active_pct == 50.0
    assert fake.call_count("nvmlGpmSampleGet") == samples_taken
    probe.close()


def test_gpm_metric_the_driver_cannot_compute_is_none():
    fake = FakeNvml([FakeGpu(gpm_metrics={SM_UTIL: 50.0, DRAM_BW: 10.0})])
    probe, clock = make_probe(fake)
    probe.read()
    clock.now += 1.0
    device = probe.read().devices[0]
    assert (device.gpm_sm_active_pct, device.gpm_dram_bw_pct) == (50.0, 10.0)
    assert device.gpm_sm_occupancy_pct is None and device.gpm_tensor_active_pct is None
    probe.close()


def test_gpm_pipes_are_percent_and_traffic_is_turned_from_mib_into_bytes_per_second():
    # NVML gives the pipes' activity in percent and PCIe/NVLink traffic in MiB/s (nvml.h).
    fake = FakeNvml([FakeGpu(gpm_metrics={
        pynvml.NVML_GPM_METRIC_FP16_UTIL: 3.0, pynvml.NVML_GPM_METRIC_FP32_UTIL: 68.0,
        pynvml.NVML_GPM_METRIC_FP64_UTIL: 0.0, pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 1500.0,
        pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 250.0, pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: 0.0})])
    probe, clock = make_probe(fake)
    probe.read()
    clock.now += 1.0
    device = probe.read().devices[0]
    pipes = (device.gpm_fp16_active_pct, device.gpm_fp32_active_pct, device.gpm_fp64_active_pct)
    assert pipes == (3.0, 68.0, 0.0)
    assert (device.gpm_pcie_rx_bytes_per_s, device.gpm_pcie_tx_bytes_per_s) == (1500.0 * 2**20, 250.0 * 2**20)
    assert device.gpm_nvlink_rx_bytes_per_s == 0.0
    assert device.gpm_nvlink_tx_bytes_per_s is None  # a metric the driver does not compute (no NVLink here)
    probe.close()


def test_gpm_unsupported_device_has_no_gpm_and_says_so():
    fake = two_h200s()
    fake.gpus[1].gpm_supported = False
    fake.gpus[1].name = "NVIDIA A100-SXM4-80GB"
    probe, clock = make_probe(fake)
    probe.read()
    clock.now += 1.0
    reading = probe.read()
    assert reading.devices[1].gpm_sm_active_pct is None
    assert reading.reason == "GPM metrics not supported on GPU 1 (they need Hopper or newer)"
    assert fake.live_gpm_samples == 2  # only device 0 got buffers
    probe.close()
    assert fake.live_gpm_samples == 0


def test_gpm_sample_failure_restarts_the_pair():
    fake = FakeNvml([FakeGpu(gpm_metrics={SM_UTIL: 50.0, SM_OCCUPANCY: 20.0, TENSOR: 30.0, DRAM_BW: 10.0})])
    probe, clock = make_probe(fake)
    probe.read()
    fake.gpus[0].errors = {"nvmlGpmSampleGet": pynvml.NVML_ERROR_UNKNOWN}
    clock.now += 1.0
    failed = probe.read()
    assert failed.devices[0].gpm_sm_active_pct is None
    assert failed.reason == "GPU 0: Unknown Error (gpm_sample)"
    fake.gpus[0].errors = {}
    clock.now += 1.0
    assert probe.read().devices[0].gpm_sm_active_pct is None  # a fresh first sample
    clock.now += 1.0
    assert probe.read().devices[0].gpm_sm_active_pct == 50.0
    probe.close()
    assert fake.live_gpm_samples == 0


# --- the fake stays honest ---------------------------------------------------------------------------


def test_fake_functions_exist_in_real_pynvml_with_the_same_parameters():
    fake_functions = {
        name: member
        for name, member in inspect.getmembers(FakeNvml, inspect.isfunction)
        if name.startswith("nvml") and name not in REEXPORTED
    }
    assert len(fake_functions) >= 20
    for name, function in fake_functions.items():
        real = getattr(pynvml, name, None)
        assert callable(real), f"pynvml has no {name}"
        fake_parameters = list(inspect.signature(function).parameters)[1:]  # drop self
        assert fake_parameters == list(inspect.signature(real).parameters), name


def test_fake_constants_errors_and_structures_are_the_real_ones():
    fake = FakeNvml()
    for name in REEXPORTED:
        assert getattr(fake, name) is getattr(pynvml, name), name
    for error_class in (
        "NotSupported",
        "NoPermission",
        "LibraryNotFound",
        "DriverNotLoaded",
        "FunctionNotFound",
    ):
        assert issubclass(getattr(fake, "NVMLError_" + error_class), fake.NVMLError)


def test_every_nvml_name_the_probe_uses_exists_in_real_pynvml():
    """Attribute names the probe reads from the module, and function/constant names it looks up by string."""
    source = (REPO / "probes" / "sensors" / "nvml.py").read_text()
    tree = ast.parse(source)
    names = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "nvml"
    }
    names |= {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith(("nvmlDevice", "nvmlGpm", "NVML_", "NVMLError", "NVMLLibrary", "c_nvml"))
    }
    names |= {metric.nvml_constant for metric in GPM_METRICS}  # the GPM metrics the sensor asks for by name
    assert {"nvmlDeviceGetCurrentClocksEventReasons", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"} <= names
    missing = sorted(name for name in names if not hasattr(pynvml, name))
    assert missing == []

    import probes.sensors.nvml as probe_module

    # Each reason under either name, except the newest, which an older nvidia-ml-py lacks altogether (13.610.43,
    # on a real H100 machine, has no BoardLimit or Reliability): their bits are then named unknown_0x...
    for suffix, name in probe_module._CLOCK_EVENT_REASONS:
        bit = getattr(pynvml, "nvmlClocksEventReason" + suffix, None) or getattr(
            pynvml, "nvmlClocksThrottleReason" + suffix, None)
        if bit is not None:
            assert decode_clock_event_reasons(pynvml, bit) == (name,)
        else:
            assert suffix in ("BoardLimit", "Reliability"), suffix


def test_a_reason_this_nvidia_ml_py_does_not_name_is_reported_by_its_bit():
    class OlderPynvml:  # nvidia-ml-py 13.610.43: no BoardLimit (0x200) under either name
        nvmlClocksEventReasonSwPowerCap = 0x4

    assert decode_clock_event_reasons(OlderPynvml, 0x204) == ("sw_power_cap", "unknown_0x200")


def test_the_boards_maximum_power_limit_is_read_and_none_where_unsupported():
    fake = two_h200s()
    fake.gpus[0].power_limit_mw, fake.gpus[0].power_max_limit_mw = 600_000, 700_000
    fake.gpus[1].power_max_limit_mw = None  # nvmlDeviceGetPowerManagementLimitConstraints: not supported
    probe, _ = make_probe(fake)
    first, second = probe.read().devices
    assert (first.power_limit_w, first.power_max_limit_w) == (600.0, 700.0)
    assert second.power_max_limit_w is None
    probe.close()
