"""Target: the main thread burns CPU in a named function while other threads sit idle.

Usage: loop_threads.py [--threads N] [--sleepers M] [--seconds S]. Prints "ready" once every thread
has started, from inside the busy function. The main thread spins in ``busy_spin_for_gputop``; N threads named
idle-K wait on an Event (a Python-level wait); M threads named sleeper-K loop on time.sleep in
``sleep_loop_for_gputop`` (a C-level wait, invisible in Python frames).
"""

from __future__ import annotations

import argparse
import threading
import time


def idle_wait_for_gputop(stop: threading.Event) -> None:
    stop.wait()


def sleep_loop_for_gputop(stop: threading.Event) -> None:
    while not stop.is_set():
        time.sleep(0.5)


def busy_spin_for_gputop(until: float) -> int:
    # "ready" is said from in here: a test that reads it and then dumps the main thread finds it in this function.
    # Said in main() before the call, a dump on a loaded machine could land before the call was made (the main
    # thread descheduled right after its write) and show main() innermost.
    print("ready", flush=True)
    total = 0
    while time.monotonic() < until:
        for i in range(10_000):
            total += i * i
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--sleepers", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args()
    stop = threading.Event()
    threads = [
        threading.Thread(target=idle_wait_for_gputop, args=(stop,), name=f"idle-{n}", daemon=True)
        for n in range(args.threads)
    ] + [
        threading.Thread(target=sleep_loop_for_gputop, args=(stop,), name=f"sleeper-{n}", daemon=True)
        for n in range(args.sleepers)
    ]
    for thread in threads:
        thread.start()
    busy_spin_for_gputop(time.monotonic() + args.seconds)
    stop.set()


if __name__ == "__main__":
    main()
