"""Target: a training-like pure-Python loop (no torch, starts fast). Extra arguments are ignored.

Prints "ready" once running; runs for --seconds (default 60) and exits 0, so tests can watch it exit.
"""

import sys
import time


def train_step_for_gputop(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def main() -> None:
    seconds = 60.0
    if "--seconds" in sys.argv:
        seconds = float(sys.argv[sys.argv.index("--seconds") + 1])
    print("ready", flush=True)
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        train_step_for_gputop(20_000)


if __name__ == "__main__":
    main()
