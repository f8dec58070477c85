"""Run inside a new PID namespace (``unshare --pid --fork --mount-proc``, as root): a real PID reuse.

Starts a Python target, reads it with ProcessTreeProbe, kills it, then makes the kernel hand its PID to a
new process (`sleep`) by writing ns_last_pid (root may, in its own PID namespace; no other process there
takes PIDs meanwhile), and reads again. Prints one JSON object with what the probe saw, for
tests/unit/test_faults.py.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil

from probes.sensors.proctree import ProcessTreeProbe

TARGET = Path(__file__).with_name("busy_loop.py")
NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"


def main() -> None:
    first = subprocess.Popen([sys.executable, str(TARGET)], stdout=subprocess.PIPE, text=True)
    assert first.stdout.readline().strip() == "ready"
    first_created = psutil.Process(first.pid).create_time()
    probe = ProcessTreeProbe(first.pid)
    before, _ = probe.read()
    first.kill()
    first.wait()
    # psutil tells processes apart by PID and start time, kept in clock ticks: the new owner of the PID
    # must start on a later tick than the first, as it would in life.
    while time.time() < first_created + 0.05:
        time.sleep(0.01)
    second = None
    for _ in range(10):
        with open(NS_LAST_PID, "w") as handle:
            handle.write(str(first.pid - 1))
        candidate = subprocess.Popen(["sleep", "600"])
        if candidate.pid == first.pid:
            second = candidate
            break
        candidate.kill()
        candidate.wait()
    if second is None:
        print(json.dumps({"error": f"PID {first.pid} was not handed out again"}))
        return
    try:
        # Popen returns as the exec begins; the new program's command line shows a moment later.
        deadline = time.monotonic() + 10
        while psutil.Process(second.pid).cmdline() != ["sleep", "600"] and time.monotonic() < deadline:
            time.sleep(0.01)
        after, processes = probe.read()
        print(json.dumps({
            "pid": first.pid,
            "second_pid": second.pid,
            "second_cmdline": psutil.Process(second.pid).cmdline(),
            "before": {"alive": before.alive, "cmdline": list(before.cmdline)},
            "after": {"alive": after.alive, "cmdline": list(after.cmdline), "exit_reason": after.exit_reason},
            "processes": [{"pid": p.pid, "name": p.name, "alive": p.alive, "cmdline": list(p.cmdline)}
                          for p in processes],
        }))
    finally:
        second.kill()
        second.wait()


if __name__ == "__main__":
    main()
