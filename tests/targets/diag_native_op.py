"""Target: one long native call (a single large single-threaded matmul) at 100% CPU: the Python stack
does not move for many seconds, yet the process is busy, not hung.

Usage: diag_native_op.py [--size N]. Prints "ready" just before the call.
"""

from __future__ import annotations

import argparse

import torch


def one_long_matmul(size: int) -> torch.Tensor:
    a = torch.randn(size, size, dtype=torch.float64)
    b = torch.randn(size, size, dtype=torch.float64)
    print("ready", flush=True)
    return a @ b


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=6000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    while True:
        one_long_matmul(args.size)


if __name__ == "__main__":
    main()
