"""Target: the main thread burns CPU in a named function while N threads sit idle on an Event.

Usage: loop_threads.py [--threads N] [--seconds S]. Prints "ready" once every thread has started.
The busy function is ``busy_spin_for_gputop`` so tests can find it by name in sampled stacks.
"""

from __future__ import annotations

import argparse
import threading
import time


def idle_wait_for_gputop(stop: threading.Event) -> None:
    stop.wait()


def busy_spin_for_gputop(until: float) -> int:
    total = 0
    while time.monotonic() < until:
        for i in range(10_000):
            total += i * i
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args()
    stop = threading.Event()
    threads = [
        threading.Thread(target=idle_wait_for_gputop, args=(stop,), name=f"idle-{n}", daemon=True)
        for n in range(args.threads)
    ]
    for thread in threads:
        thread.start()
    print("ready", flush=True)
    busy_spin_for_gputop(time.monotonic() + args.seconds)
    stop.set()


if __name__ == "__main__":
    main()
