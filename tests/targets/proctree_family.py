"""Target: a small process family for the process-tree probe's tests.

Usage: proctree_family.py READY_FILE. Starts three children: one that spins on the CPU, one that sleeps
and has a sleeping grandchild, and one whose command line names inductor's compile worker. Once every
process is up it writes their PIDs to READY_FILE as JSON, then writes 100 kB to READY_FILE.scratch every
0.1 s (about 1 MB/s of write chars) until killed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

# Every child prints its PID once it has started, so the family is settled when the file appears.
SPIN = "import os; print(os.getpid(), flush=True)\nwhile True: pass"
SLEEP = "import os, time; print(os.getpid(), flush=True); time.sleep(600)"
SLEEP_WITH_CHILD = (
    "import subprocess, sys, time\n"
    f"child = subprocess.Popen([sys.executable, '-c', {SLEEP!r}], stdout=subprocess.PIPE, text=True)\n"
    "print(child.stdout.readline().strip(), flush=True)\n"
    "time.sleep(600)\n"
)
# The extra argument only makes the command line look like inductor's compile worker.
FAKE_COMPILE_WORKER = [
    sys.executable,
    "-c",
    SLEEP,
    "/site-packages/torch/_inductor/compile_worker/__main__.py",
]


def start(argv: list[str]) -> tuple[subprocess.Popen, int]:
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    return child, int(child.stdout.readline())


def main() -> None:
    ready_file = sys.argv[1]
    busy, _ = start([sys.executable, "-c", SPIN])
    idle, grandchild = start([sys.executable, "-c", SLEEP_WITH_CHILD])
    compile_worker, _ = start(FAKE_COMPILE_WORKER)
    pids = {
        "busy": busy.pid,
        "idle": idle.pid,
        "grandchild": grandchild,
        "compile_worker": compile_worker.pid,
    }
    with open(ready_file + ".tmp", "w") as f:
        json.dump(pids, f)
    os.replace(ready_file + ".tmp", ready_file)
    block = b"x" * 100_000
    with open(ready_file + ".scratch", "wb", buffering=0) as scratch:
        while True:
            scratch.seek(0)
            scratch.write(block)
            time.sleep(0.1)


if __name__ == "__main__":
    main()
