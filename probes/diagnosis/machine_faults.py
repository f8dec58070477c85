"""The machine's own faults on the job's GPUs, joined to the rank on each: the NVIDIA driver's Xid lines in the kernel
log (matched to a GPU by PCI bus id) and the fault counters NVML keeps (uncorrected ECC errors, row remaps, PCIe
replays, NVLink errors) where they rose while gputop watched. "Rank 5 is the straggler" becomes "rank 5's GPU 5
logged Xid 79 at 03:12:07: the GPU has fallen off the bus — the node, not the code" where that is what the machine
says.

A count already there when gputop attached is history, not news: only a rise between the frames is said. Which side a
fault points at (the job's code or the node) is NVIDIA's catalogue's word (probes/sensors/kernel_log.py XID_MEANINGS);
a node's fault is the headline, an application's one line under it.

Pure: frames in, faults out.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from probes.frame import ROLE_RANK, Frame, GpuDevice
from probes.sensors.kernel_log import xid_meaning

NODE_ADVICE = ("The machine, not the job: take this node out of the job (drain it in Slurm, or exclude it), reset the "
               "GPU (nvidia-smi -r) or reboot, and tell whoever runs the nodes; a restart elsewhere resumes from the "
               "last checkpoint.")
# NVML's counters said as rises, with the side each points at.
COUNTERS: tuple[tuple[str, str], ...] = (
    ("ecc_uncorrected_volatile", "uncorrected ECC errors in the GPU's memory"),
    ("remapped_rows_uncorrectable", "memory rows remapped after uncorrectable errors"),
    ("pcie_replays", "PCIe replays (a flaky link or riser: slow transfers)"),
    ("nvlink_errors", "NVLink errors (replays, recoveries, CRC: slow or stuck collectives)"),
)


@dataclass(frozen=True)
class GpuFault:
    """One fault on one of the job's GPUs, in words, and whether it points at the node."""

    gpu_index: int
    words: str
    node: bool


def gpu_faults(history: Sequence[Frame]) -> list[GpuFault]:
    """The faults on the job's GPUs over the frames: Xids first (by time), then counter rises; node faults first."""
    if not history:
        return []
    latest = history[-1]
    devices = {d.pci_bus_id: d for d in latest.gpu.devices if d.in_target and d.pci_bus_id}
    if not devices:
        return []
    holders = _holders(latest)
    faults = []
    for frame in history:
        for event in frame.kernel_events:
            device = devices.get(event.pci_bus_id or "")
            if event.kind != "xid" or device is None or event.code is None:
                continue
            meaning = xid_meaning(event)
            at = time.strftime(" at %H:%M:%S", time.localtime(event.wall_time)) if event.wall_time else ""
            what = meaning.meaning if meaning is not None else event.detail
            node = meaning is not None and meaning.points_at == "node"
            side = "the node, not the code" if node else "the job's own GPU work" if meaning is not None else \
                "a code NVIDIA's catalogue here does not list"
            faults.append(GpuFault(device.index, f"{_whose(device, holders)} logged Xid {event.code}{at}: {what} — "
                                                 f"{side}", node))
    first = next((f for f in history if f.gpu.available), None)
    if first is not None:
        before = {d.index: d for d in first.gpu.devices}
        for device in devices.values():
            faults += _rises(before.get(device.index), device, holders)
    return sorted(faults, key=lambda f: not f.node)


def _rises(before: GpuDevice | None, now: GpuDevice, holders: dict[int, str]) -> list[GpuFault]:
    found = []
    for field, words in COUNTERS:
        then, current = getattr(before, field, None) if before is not None else None, getattr(now, field)
        if then is not None and current is not None and current > then:
            found.append(GpuFault(now.index, f"{_whose(now, holders)}: {current - then} {words} since gputop "
                                             "attached", field != "pcie_replays"))
    if now.remap_failed:
        found.append(GpuFault(now.index, f"{_whose(now, holders)}: a memory row remap failed: the GPU needs "
                                         "service", True))
    elif now.remap_pending and not (before is not None and before.remap_pending):
        found.append(GpuFault(now.index, f"{_whose(now, holders)}: a memory row remap waits for a GPU reset", True))
    return found


def _holders(frame: Frame) -> dict[int, str]:
    """{GPU index: "rank 5" (or several)} from the live ranks' GPUs."""
    ranks: dict[int, list[int]] = {}
    for p in frame.processes:
        if p.alive and p.role == ROLE_RANK and p.gpu_index is not None and p.rank is not None:
            ranks.setdefault(p.gpu_index, []).append(p.rank)
    return {index: "rank" + ("s " if len(held) > 1 else " ") + ", ".join(map(str, sorted(held)))
            for index, held in ranks.items()}


def _whose(device: GpuDevice, holders: dict[int, str]) -> str:
    holder = holders.get(device.index)
    return f"{holder}'s GPU {device.index}" if holder else f"GPU {device.index} ({device.pci_bus_id})"
