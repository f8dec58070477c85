"""Target: a loop limited to a rate by design: each 0.1 s step computes for 20 ms of CPU and sleeps the rest, as a
job throttled to a request rate or a data feed does. Its CPUs are free most of the time, by its own choice.

Usage: rate_limited.py. Prints "ready" after the first step.
"""

from __future__ import annotations

import time

WORK_CPU_S = 0.02
STEP_S = 0.1


def work_step() -> int:
    deadline = time.thread_time() + WORK_CPU_S
    total = 0
    while time.thread_time() < deadline:
        total += sum(range(1000))
    return total


def main() -> None:
    step = 0
    while True:
        began = time.monotonic()
        work_step()
        if step == 0:
            print("ready", flush=True)
        step += 1
        time.sleep(max(0.0, STEP_S - (time.monotonic() - began)))


if __name__ == "__main__":
    main()
