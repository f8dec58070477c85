"""The GPU probe (probes/sensors/nvml.py) against a fake pynvml (tests/support/fake_pynvml.py), plus checks that the
fake matches the real nvidia-ml-py, and the real probe with the real pynvml on this machine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pynvml
import pytest
from support.fake_pynvml import two_h200s

from probes.sensors.nvml import (
    NvmlGpuProbe,
)

REPO = Path(__file__).resolve().parents[2]

SM_UTIL = pynvml.NVML_GPM_METRIC_SM_UTIL
SM_OCCUPANCY = pynvml.NVML_GPM_METRIC_SM_OCCUPANCY
TENSOR = pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
DRAM_BW = pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL


# --- no library, no driver, no device ----------------------------------------------------------------


@pytest.mark.slow
def test_pynvml_is_imported_lazily_by_the_probe_only(monkeypatch):
    imported = subprocess.run(
        [sys.executable, "-c", "import sys, probes.sensors.nvml; print('pynvml' in sys.modules)"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert imported.stdout.strip() == "False"

    fake = two_h200s()
    monkeypatch.setitem(sys.modules, "pynvml", fake)  # what `import pynvml` inside the probe will get
    probe = NvmlGpuProbe()
    assert probe.read().available
    probe.close()
    assert fake.init_count == 0
