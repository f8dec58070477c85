"""The machine's own faults as the GPU probe (probes/sensors/nvml.py) reads them: PCI bus id, ECC counts, row
remapping, retired pages, PCIe replays, NVLink errors; what a GPU does not support asked once; the counters read at
most every FAULT_READ_INTERVAL_S. All against the fake pynvml (tests/support/fake_pynvml.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pynvml
from support.fake_pynvml import FakeGpu, FakeNvml, two_h200s

from probes.frame import from_jsonable, to_jsonable
from probes.sensors.kernel_log import normalise_pci_bus_id
from probes.sensors.nvml import FAULT_READ_INTERVAL_S, NvmlGpuProbe, _pci_bus_id

UNCORRECTED, CORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
VOLATILE, AGGREGATE = pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC
REPLAY, CRC_FLIT = pynvml.NVML_NVLINK_ERROR_DL_REPLAY, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT
FAULT_FIELDS = ("ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "ecc_corrected_volatile",
                "remapped_rows_uncorrectable", "remap_pending", "remap_failed", "retired_pages",
                "retired_pages_pending", "pcie_replays", "nvlink_errors")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_probe(fake: FakeNvml) -> tuple[NvmlGpuProbe, FakeClock]:
    clock = FakeClock()
    return NvmlGpuProbe(fake, clock=clock), clock


def unsupported_gpu(**changes) -> FakeGpu:
    """A GPU that reports none of the faults: no ECC, row remapping, page retirement, PCIe counter or NVLink."""
    return FakeGpu(pci_bus_id=None, ecc_enabled=None, remapped_rows=None, retired_pages=None, pcie_replays=None,
                   nvlink_links=None, **changes)


def test_the_faults_land_on_each_gpu():
    fake = two_h200s()
    hopper = fake.gpus[0]
    hopper.ecc_counts = {(UNCORRECTED, VOLATILE): 2, (UNCORRECTED, AGGREGATE): 5, (CORRECTED, VOLATILE): 31}
    hopper.remapped_rows = (3, 2, 1, 0)  # correctable, uncorrectable, pending, failed
    hopper.pcie_replays = 7
    hopper.nvlink_down = {17}
    hopper.nvlink_error_counts = {(0, REPLAY): 4, (5, CRC_FLIT): 6, (17, REPLAY): 100}  # 17 is down: not counted
    probe, _ = make_probe(fake)
    reading = probe.read()
    first, second = reading.devices

    assert reading.reason is None
    assert (first.pci_bus_id, second.pci_bus_id) == ("00000000:18:00.0", "00000000:2A:00.0")
    assert (first.ecc_uncorrected_volatile, first.ecc_uncorrected_aggregate, first.ecc_corrected_volatile) == (2, 5, 31)
    assert (first.remapped_rows_uncorrectable, first.remap_pending, first.remap_failed) == (2, True, False)
    assert (first.retired_pages, first.retired_pages_pending) == (None, None)  # Hopper remaps rows, retires no pages
    assert (first.pcie_replays, first.nvlink_errors) == (7, 10)
    # A healthy GPU: zeros and False, not None.
    assert [getattr(second, name) for name in FAULT_FIELDS] == [0, 0, 0, 0, False, False, None, None, 0, 0]
    assert from_jsonable(type(reading), to_jsonable(reading)) == reading
    probe.close()


def test_a_gpu_before_ampere_reports_retired_pages_and_no_row_remapping():
    double_bit = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    single_bits = pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    volta = FakeGpu(name="Tesla V100-SXM2-32GB", remapped_rows=None, nvlink_links=6,
                    retired_pages={double_bit: [0x1000, 0x2000], single_bits: [0x3000]}, retired_pages_pending=True)
    probe, _ = make_probe(FakeNvml([volta]))
    (device,) = probe.read().devices
    assert (device.retired_pages, device.retired_pages_pending) == (3, True)
    assert (device.remapped_rows_uncorrectable, device.remap_pending, device.remap_failed) == (None, None, None)
    assert device.nvlink_errors == 0
    probe.close()


def test_what_a_gpu_does_not_report_is_none_and_asked_once():
    fake = FakeNvml([unsupported_gpu(), FakeGpu()])
    probe, clock = make_probe(fake)
    for _ in range(4):
        reading = probe.read()
        clock.now += FAULT_READ_INTERVAL_S + 1
    bare, full = reading.devices

    assert reading.reason is None  # not supported is normal, not news
    assert bare.pci_bus_id is None and all(getattr(bare, name) is None for name in FAULT_FIELDS)
    assert full.pcie_replays == 0 and full.pci_bus_id == "00000000:18:00.0"
    calls = {name: sum(1 for called, index in fake.calls if called == name and index == 0) for name in (
        "nvmlDeviceGetPciInfo", "nvmlDeviceGetEccMode", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetRetiredPages", "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetPcieReplayCounter",
        "nvmlDeviceGetNvLinkErrorCounter")}
    # Each once; the ECC counts three times (one per kind); the retired pages once per cause.
    assert calls == {"nvmlDeviceGetPciInfo": 1, "nvmlDeviceGetEccMode": 1, "nvmlDeviceGetTotalEccErrors": 3,
                     "nvmlDeviceGetRemappedRows": 1, "nvmlDeviceGetRetiredPages": 2,
                     "nvmlDeviceGetRetiredPagesPendingStatus": 1, "nvmlDeviceGetPcieReplayCounter": 1,
                     "nvmlDeviceGetNvLinkErrorCounter": 0}
    # Which links are up is asked once per link NVML can name, never again.
    link_states = [index for called, index in fake.calls if called == "nvmlDeviceGetNvLinkState"]
    assert link_states.count(0) == pynvml.NVML_NVLINK_MAX_LINKS and link_states.count(1) == pynvml.NVML_NVLINK_MAX_LINKS
    # The supported GPU's counters are read on every fault read: 4 reads here.
    assert sum(1 for called, index in fake.calls if called == "nvmlDeviceGetPcieReplayCounter" and index == 1) == 4
    probe.close()


def test_no_permission_a_driver_without_the_function_and_an_old_binding_are_none_quietly_and_asked_once():
    gpu = FakeGpu(errors={"nvmlDeviceGetPcieReplayCounter": pynvml.NVML_ERROR_NO_PERMISSION})
    fake = FakeNvml([gpu], driver_lacks={"nvmlDeviceGetRemappedRows"},
                    module_lacks={"nvmlDeviceGetNvLinkErrorCounter"})
    probe, clock = make_probe(fake)
    for _ in range(3):
        reading = probe.read()
        clock.now += FAULT_READ_INTERVAL_S
    (device,) = reading.devices
    assert reading.reason is None
    assert (device.pcie_replays, device.remap_pending, device.nvlink_errors) == (None, None, None)
    assert device.ecc_uncorrected_volatile == 0  # the rest still read
    assert fake.call_count("nvmlDeviceGetPcieReplayCounter") == 1
    assert fake.call_count("nvmlDeviceGetRemappedRows") == 1
    assert fake.call_count("nvmlDeviceGetNvLinkErrorCounter") == 0
    probe.close()


def test_ecc_off_gives_no_counts_and_never_asks_for_them():
    fake = FakeNvml([FakeGpu(ecc_enabled=False)])
    probe, clock = make_probe(fake)
    for _ in range(2):
        (device,) = probe.read().devices
        clock.now += FAULT_READ_INTERVAL_S
    assert (device.ecc_uncorrected_volatile, device.ecc_uncorrected_aggregate, device.ecc_corrected_volatile) == (
        None, None, None)
    assert fake.call_count("nvmlDeviceGetEccMode") == 1 and fake.call_count("nvmlDeviceGetTotalEccErrors") == 0
    probe.close()


def test_the_fault_counters_are_read_at_most_every_interval_and_carried_in_between():
    fake = FakeNvml([FakeGpu(nvlink_down={16, 17})])
    gpu = fake.gpus[0]
    probe, clock = make_probe(fake)
    probe.read()
    gpu.pcie_replays, gpu.nvlink_error_counts = 9, {(3, REPLAY): 2}
    gpu.remapped_rows = (0, 1, 1, 0)
    seen = []
    for step in (1.0, 5.0, FAULT_READ_INTERVAL_S - 0.1, FAULT_READ_INTERVAL_S):
        clock.now = 1000.0 + step
        (device,) = probe.read().devices
        seen.append((device.pcie_replays, device.nvlink_errors, device.remap_pending))
    # The last values until the interval has passed, then the new ones.
    assert seen == [(0, 0, False)] * 3 + [(9, 2, True)]
    assert fake.call_count("nvmlDeviceGetPcieReplayCounter") == 2
    assert fake.call_count("nvmlDeviceGetNvLinkErrorCounter") == 2 * 16 * 4  # two reads, 16 active links, 4 counters
    assert fake.call_count("nvmlDeviceGetNvLinkState") == pynvml.NVML_NVLINK_MAX_LINKS  # once
    assert fake.call_count("nvmlDeviceGetPowerUsage") == 5  # the live fields, every tick
    probe.close()


def test_a_counter_that_fails_gives_none_that_read_says_why_and_is_asked_again():
    fake = FakeNvml([FakeGpu(nvlink_error_counts={(0, REPLAY): 3})])
    fake.gpus[0].errors = {"nvmlDeviceGetNvLinkErrorCounter": pynvml.NVML_ERROR_UNKNOWN}
    probe, clock = make_probe(fake)
    reading = probe.read()
    assert reading.devices[0].nvlink_errors is None  # no partial sum that would look like fewer errors
    assert reading.reason == "GPU 0: Unknown Error (nvlink_errors)"
    fake.gpus[0].errors = {}
    clock.now += FAULT_READ_INTERVAL_S
    reading = probe.read()
    assert reading.devices[0].nvlink_errors == 3 and reading.reason is None
    probe.close()


def test_existing_fields_a_gpu_does_not_support_are_asked_once_too():
    gpu = FakeGpu(power_max_limit_mw=None)
    gpu.errors = {"nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_NOT_SUPPORTED,
                  "nvmlDeviceGetCurrentClocksEventReasons": pynvml.NVML_ERROR_NOT_SUPPORTED}
    fake = FakeNvml([gpu])
    probe, clock = make_probe(fake)
    for _ in range(3):
        (device,) = probe.read().devices
        clock.now += 1.0
    assert (device.power_w, device.power_max_limit_w, device.clock_event_reasons) == (None, None, ())
    assert fake.call_count("nvmlDeviceGetPowerUsage") == 1
    assert fake.call_count("nvmlDeviceGetPowerManagementLimitConstraints") == 1  # static: was asked every tick
    assert fake.call_count("nvmlDeviceGetCurrentClocksEventReasons") == 1
    assert fake.call_count("nvmlDeviceGetCurrentClocksThrottleReasons") == 3  # the fallback that works, every tick
    assert fake.call_count("nvmlDeviceGetEnforcedPowerLimit") == 3  # supported: every tick
    probe.close()


def test_a_bus_id_in_any_form_comes_out_in_nvmls_and_matches_the_kernel_logs():
    probe, _ = make_probe(FakeNvml([FakeGpu(pci_bus_id="0000:3b:00.0")]))
    (device,) = probe.read().devices
    assert device.pci_bus_id == "00000000:3B:00.0"
    assert device.pci_bus_id == normalise_pci_bus_id("PCI:0000:3b:00")  # as an Xid line prints it
    probe.close()
    assert _pci_bus_id(SimpleNamespace(busId=b"00000000:3b:00.0")) == "00000000:3B:00.0"  # an older binding's bytes
    assert _pci_bus_id(SimpleNamespace(busId="", busIdLegacy="0000:3B:00.0")) == "00000000:3B:00.0"
    assert _pci_bus_id(SimpleNamespace(busId="junk")) is None
    assert _pci_bus_id(None) is None


def test_a_bus_id_nvml_forbids_is_none_quietly_and_asked_once():
    fake = FakeNvml([FakeGpu(errors={"nvmlDeviceGetPciInfo": pynvml.NVML_ERROR_NO_PERMISSION,
                                     "nvmlDeviceGetEccMode": pynvml.NVML_ERROR_NO_PERMISSION})])
    probe, _ = make_probe(fake)
    for _ in range(3):
        reading = probe.read()
    assert reading.reason is None and reading.devices[0].pci_bus_id is None
    assert reading.devices[0].ecc_uncorrected_volatile == 0  # ECC's mode unknown: the counts are still asked
    assert fake.call_count("nvmlDeviceGetPciInfo") == 1 and fake.call_count("nvmlDeviceGetEccMode") == 1
    probe.close()
