"""A process that sleeps in the kernel (state S, no CPU) with no Python stack to be stuck in is "sleeping", not
"HUNG" (issue 20: `gputop --pid` on a `sleep` said "HUNG 92%"). Real processes, real py-spy, the real CLI; a real
Python deadlock beside them stays hung, so the new word cannot swallow the hangs gputop exists to find."""

from __future__ import annotations

import json
import subprocess

import pytest
from support.cli import gputop, ready


def _verdict_of(pid: int) -> dict:
    result = gputop("--pid", str(pid), "--snapshot", "-", "--duration", "5", "--hang-after", "2", timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["verdict"]


@pytest.mark.slow
@pytest.mark.parametrize("command", [["sleep", "600"], ["bash", "-c", "sleep 600; echo done"]],
                         ids=["sleep", "bash-waiting-for-its-child"])
def test_a_process_sleeping_in_the_kernel_is_sleeping_not_hung(command):
    process = subprocess.Popen(command)
    try:
        verdict = _verdict_of(process.pid)
    finally:
        process.kill()
        process.wait()
    assert verdict["liveness"] == "sleeping", verdict
    # No stack can be read from a program that is not Python: the cannot_see rule names that, beside the liveness.
    assert verdict["bottleneck"] == "cannot_see"
    assert "not a Python process" in verdict["evidence"][0]


@pytest.mark.slow
def test_a_deadlocked_python_process_is_still_hung(spawn_target):
    target = spawn_target("diag_deadlock.py", stdout=subprocess.PIPE, ready=ready)
    verdict = _verdict_of(target.pid)
    assert verdict["liveness"] == "hung", verdict


@pytest.mark.slow
def test_an_idle_dataloader_worker_is_sleeping_not_hung(spawn_target):
    import psutil
    from support.processes import wait_for

    # The main loop "trains" for 10 minutes per batch: its worker fills the prefetch queue and sleeps.
    target = spawn_target("dataloader_loop.py", "--num-workers", "1", "--item-ms", "5", "--step-ms", "600000",
                          stdout=subprocess.PIPE, ready=ready, timeout=120)
    worker = wait_for(lambda: next((c for c in psutil.Process(target.pid).children(recursive=True)
                                    if c.name() == "pt_data_worker"), None), timeout=60)
    verdict = _verdict_of(worker.pid)
    assert verdict["liveness"] == "sleeping", verdict
    assert "is a DataLoader worker asleep" in verdict["evidence"][0]
