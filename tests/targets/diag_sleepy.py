"""Target: a loop that does a short burst of work and then sleeps ~2 s between steps: slow, not hung.

Usage: diag_sleepy.py [--sleep S]. Prints "ready" after the first step.
"""

from __future__ import annotations

import argparse
import time


def work_step() -> int:
    deadline = time.thread_time() + 0.15
    total = 0
    while time.thread_time() < deadline:
        total += sum(range(1000))
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sleep", type=float, default=2.0)
    args = parser.parse_args()
    step = 0
    while True:
        work_step()
        if step == 0:
            print("ready", flush=True)
        step += 1
        time.sleep(args.sleep)


if __name__ == "__main__":
    main()
