"""Target: a torch DataLoader with worker processes feeding a main loop that "trains" by sleeping.

Usage: dataloader_loop.py [--num-workers N] [--context fork|forkserver|spawn] [--item-ms MS] [--step-ms MS]
                          [--seconds S]
Each ``BurnDataset.__getitem__`` burns CPU for --item-ms in ``burn_cpu_for_gputop`` so the workers show
up in sampled stacks; the main thread sleeps --step-ms per batch. Prints "ready" once every worker has delivered a batch
(batches arrive in order, round-robin over the workers).
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


def burn_cpu_for_gputop(seconds: float) -> int:
    total = 0
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        for i in range(1_000):
            total += i * i
    return total


class BurnDataset(Dataset):
    def __init__(self, item_seconds: float) -> None:
        self.item_seconds = item_seconds

    def __len__(self) -> int:
        return 10**9  # one epoch outlives any test, so workers are never restarted

    def __getitem__(self, index: int) -> torch.Tensor:
        burn_cpu_for_gputop(self.item_seconds)
        return torch.full((4,), float(index))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--context", choices=("fork", "forkserver", "spawn"), default="fork")
    parser.add_argument("--item-ms", type=float, default=3.0)
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args()
    loader = DataLoader(
        BurnDataset(args.item_ms / 1000),
        batch_size=4,
        num_workers=args.num_workers,
        multiprocessing_context=args.context if args.num_workers else None,
    )
    deadline = time.monotonic() + args.seconds
    for batch_number, _batch in enumerate(loader):
        if batch_number == max(args.num_workers - 1, 0):
            print("ready", flush=True)
        time.sleep(args.step_ms / 1000)
        if time.monotonic() > deadline:
            break


if __name__ == "__main__":
    main()
