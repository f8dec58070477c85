"""Target: a loop that calls the same function again and again, each call one half-second matmul on one thread.

Every sample of its main thread is in work() at the same line, with the same caller: the samples cannot tell this
from one long call (issue 31: gputop said "one call has run for 14 s without returning"). The matrices are made
once and sized by time, not by a guess at this machine's speed: a small matmul is timed first.

Usage: repeated_call.py [--seconds S] (one call's length, default 0.5). Prints "ready" before the loop.
"""

from __future__ import annotations

import argparse
import time

import torch

CALIBRATION_SIZE = 500
MAX_SIZE = 4000


def size_for(seconds: float) -> int:
    """The matmul size whose single-threaded float64 run takes about `seconds` here (cost grows as n³)."""
    a = torch.randn(CALIBRATION_SIZE, CALIBRATION_SIZE, dtype=torch.float64)
    a @ a  # warm the allocator and BLAS
    started = time.perf_counter()
    a @ a
    took = max(time.perf_counter() - started, 1e-4)
    return max(CALIBRATION_SIZE, min(MAX_SIZE, int(CALIBRATION_SIZE * (seconds / took) ** (1 / 3))))


def work(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=0.5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    size = size_for(args.seconds)
    a = torch.randn(size, size, dtype=torch.float64)
    b = torch.randn(size, size, dtype=torch.float64)
    print("ready", flush=True)
    while True:
        work(a, b)


if __name__ == "__main__":
    main()
