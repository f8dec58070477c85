"""Target: a training loop starved by its DataLoader: 2 workers burn CPU in __getitem__ for every sample.

Usage: diag_dataloader.py [--seconds S]. Prints "ready" once the first batch has arrived.
The main thread spends most of its time in DataLoader.__next__ waiting for the workers.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowTransformDataset(Dataset):
    """Each item costs ~40 ms of pure-Python CPU, like a heavy augmentation pipeline."""

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> torch.Tensor:
        deadline = time.thread_time() + 0.04
        acc = 0
        while time.thread_time() < deadline:
            acc += sum(i * i for i in range(200))
        return torch.full((64,), float(acc % 7))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowTransformDataset(), batch_size=8, num_workers=2)
    end = time.monotonic() + args.seconds
    for step, batch in enumerate(loader):
        loss = model(batch).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 0:
            print("ready", flush=True)
        if time.monotonic() > end:
            break


if __name__ == "__main__":
    main()
