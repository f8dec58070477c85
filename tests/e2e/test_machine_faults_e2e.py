"""The machine's own faults in the verdict (issue 40), with the real kernel log: while gputop's engine watches a real
process on a fake GPU (tests/support/fake_pynvml.py, the PCI bus id of the test's choosing), the test writes an NVIDIA
Xid line for that bus id to /dev/kmsg (as root, as the driver would); the verdict's first line names the Xid on that
GPU, the node and not the code. Beside it, an engine whose GPU has another bus id says nothing of it.

A node's fault is named on its rank (rank 5's GPU 5) in tests/unit/test_machine_faults.py, on constructed frames."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.fake_pynvml import GIB, FakeGpu, FakeNvml
from support.processes import wait_for

from probes.monitoring.engine import Engine, EngineConfig
from probes.monitoring.monitor import Monitor

pytestmark = pytest.mark.slow
KMSG = "/dev/kmsg"


def _bus(pid: int) -> tuple[str, str]:
    """A bus id no other test writes (from this test's PID): (the kernel's form, NVML's form)."""
    bus = 0x40 + pid % 0x80
    return f"0000:{bus:02x}:00", f"00000000:{bus:02X}:00.0"


def test_an_xid_on_the_jobs_gpu_is_the_first_line_and_not_another_gpus(tmp_path):
    if os.geteuid() != 0 or not os.access(KMSG, os.R_OK | os.W_OK):
        pytest.skip("needs root and a writable /dev/kmsg (writing a driver's line as the driver would)")
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        kernel_bus, nvml_bus = _bus(os.getpid())
        config = EngineConfig(sample_stacks=False, process_only=True)
        ours = Engine(job.pid, config, nvml=FakeNvml([FakeGpu(pci_bus_id=nvml_bus, processes=[(job.pid, GIB)])]))
        other_bus = "00000000:17:00.0" if nvml_bus != "00000000:17:00.0" else "00000000:16:00.0"
        theirs = Engine(job.pid, config, nvml=FakeNvml([FakeGpu(pci_bus_id=other_bus, processes=[(job.pid, GIB)])]))
        mine, other = Monitor(), Monitor()
        try:
            for _ in range(2):
                mine.ingest(ours.tick())
                other.ingest(theirs.tick())
            assert not any("Xid" in line for line in mine.view.verdict.evidence)
            with open(KMSG, "w") as kmsg:
                kmsg.write(f"NVRM: Xid (PCI:{kernel_bus}): 79, pid={job.pid}, name=python, GPU has fallen off the "
                           "bus.\n")

            def named() -> str | None:
                other.ingest(theirs.tick())
                first = mine.ingest(ours.tick()).verdict.evidence[0]
                return first if "Xid 79" in first else None

            first = wait_for(named, timeout=20, interval=0.2)
        finally:
            ours.close()
            theirs.close()
    finally:
        job.kill()
        job.wait()
    assert first.startswith(f"GPU 0 ({nvml_bus}) logged Xid 79 at "), first
    assert first.endswith(": the GPU has fallen off the bus: it no longer answers on PCIe — the node, not the code")
    assert mine.view.verdict.advice[0].startswith("The machine, not the job")
    assert not any("Xid" in line for line in other.view.verdict.evidence), other.view.verdict.evidence
