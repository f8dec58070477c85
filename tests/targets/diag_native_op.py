"""Target: one long native call (a single large single-threaded matmul) at 100% CPU: the Python stack
does not move for many seconds, yet the process is busy, not hung.

The matrix is sized by time, not by a guess at this machine's speed: a small matmul is timed first and
the size is chosen so that one call lasts about --seconds (longer still on a busy machine).

Usage: diag_native_op.py [--seconds S]. Prints "ready" just before the long call.
"""

from __future__ import annotations

import argparse
import time

import torch

CALIBRATION_SIZE = 1000
MAX_SIZE = 16000  # 3 float64 matrices of 16000² are 6 GB: bounded whatever the machine


def size_for(seconds: float) -> int:
    """The matmul size whose single-threaded float64 run takes about `seconds` here (cost grows as n³)."""
    a = torch.randn(CALIBRATION_SIZE, CALIBRATION_SIZE, dtype=torch.float64)
    a @ a  # warm the allocator and BLAS
    started = time.perf_counter()
    a @ a
    took = max(time.perf_counter() - started, 1e-4)
    return max(CALIBRATION_SIZE, min(MAX_SIZE, int(CALIBRATION_SIZE * (seconds / took) ** (1 / 3))))


def one_long_matmul(size: int) -> torch.Tensor:
    a = torch.randn(size, size, dtype=torch.float64)
    b = torch.randn(size, size, dtype=torch.float64)
    print("ready", flush=True)
    return a @ b


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    size = size_for(args.seconds)
    while True:
        one_long_matmul(size)


if __name__ == "__main__":
    main()
