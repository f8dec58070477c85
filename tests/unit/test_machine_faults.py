"""The machine's faults on the job's GPUs (probes/diagnosis/machine_faults.py) on constructed frames: an Xid joined
to its GPU by bus id and to the rank on it; NVML's counters said only where they rose while watched."""

from __future__ import annotations

import dataclasses

from support.frames import FORWARD, PID, h200, main_count, make_frame, proc

from probes.diagnosis.machine_faults import gpu_faults
from probes.frame import GpuReading
from probes.machine_records import KernelEvent
from probes.monitoring.monitor import fold

BUS = "00000000:3B:00.0"


def _frame(i: int, events=(), **device):
    gpu = h200()
    gpu = GpuReading(available=True, devices=(dataclasses.replace(gpu.devices[0], index=5, pci_bus_id=BUS,
                                                                  **device),))
    frame = make_frame(i, counts=[main_count(FORWARD, n=10)], gpu=gpu,
                       processes=[proc(cpu=100.0, role="rank", rank=5, gpu_index=5)])
    return dataclasses.replace(frame, kernel_events=tuple(events))


def _xid(code: int, bus: str = BUS) -> KernelEvent:
    """An Xid line as probes/sensors/kernel_log.py reads it (the bus id already in NVML's form)."""
    return KernelEvent(kind="xid", wall_time=None, pid=PID, process_name="python", pci_bus_id=bus, code=code,
                       detail="", raw="")


def test_a_node_xid_on_a_ranks_gpu_is_the_headline_with_the_node_advice():
    frames = [_frame(0), _frame(1, [_xid(79)]), _frame(2)]
    faults = gpu_faults(frames)
    assert [f.words for f in faults] == [
        "rank 5's GPU 5 logged Xid 79: the GPU has fallen off the bus: it no longer answers on PCIe — the node, "
        "not the code"]
    verdict = fold(frames).view.verdict
    assert verdict.evidence[0] == faults[0].words
    assert verdict.advice[0].startswith("The machine, not the job")


def test_an_application_xid_goes_under_the_headline_and_another_gpus_xid_nowhere():
    verdict = fold([_frame(0), _frame(1, [_xid(13)])]).view.verdict
    assert not verdict.evidence[0].startswith("rank 5's GPU")
    assert verdict.evidence[1].startswith("rank 5's GPU 5 logged Xid 13: graphics engine exception") and \
        verdict.evidence[1].endswith("— the job's own GPU work")
    assert not gpu_faults([_frame(0), _frame(1, [_xid(79, bus="00000000:18:00.0")])])


def test_counters_are_said_only_where_they_rose_while_watched():
    before = _frame(0, ecc_uncorrected_volatile=7, pcie_replays=100)
    assert gpu_faults([before, _frame(1, ecc_uncorrected_volatile=7, pcie_replays=100)]) == []
    rose = gpu_faults([before, _frame(1, ecc_uncorrected_volatile=9, pcie_replays=130)])
    assert [(f.words, f.node) for f in rose] == [
        ("rank 5's GPU 5: 2 uncorrected ECC errors in the GPU's memory since gputop attached", True),
        ("rank 5's GPU 5: 30 PCIe replays (a flaky link or riser: slow transfers) since gputop attached", False)]
    assert gpu_faults([before, _frame(1, remap_failed=True)])[0].words == \
        "rank 5's GPU 5: a memory row remap failed: the GPU needs service"
