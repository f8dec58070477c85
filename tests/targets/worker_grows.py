"""Target: a training loop whose DataLoader worker, once the file named by --grow-when exists, keeps 8 MiB of every
batch it makes (a cache that never empties), as a leaking dataset does, until the memory cgroup's OOM killer ends
it; PyTorch then raises in the main process ("DataLoader worker (pid X) is killed by signal: Killed.").

Usage: worker_grows.py GROW_WHEN. Prints "ready WORKER_PID" once the worker has delivered a batch.
"""

from __future__ import annotations

import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset

MIB = 1 << 20


class Leaking(Dataset):
    def __init__(self, grow_when: str) -> None:
        self.grow_when = grow_when
        self.kept: list[bytearray] = []

    def __len__(self) -> int:
        return 10_000_000

    def __getitem__(self, index: int) -> torch.Tensor:
        if os.path.exists(self.grow_when):
            chunk = bytearray(8 * MIB)
            chunk[::4096] = b"\x01" * (len(chunk) // 4096)  # every page written: resident
            self.kept.append(chunk)
        return torch.full((64,), float(index % 7))


def main() -> None:
    torch.set_num_threads(1)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(Leaking(sys.argv[1]), batch_size=4, num_workers=1)
    told = False
    batches = iter(loader)
    for batch in batches:
        loss = model(batch).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if not told:
            print("ready", batches._workers[0].pid, flush=True)  # the test needs its PID
            told = True


if __name__ == "__main__":
    main()
