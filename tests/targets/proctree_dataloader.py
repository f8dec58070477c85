"""Target: a torch DataLoader with two workers, for the process-tree probe's tests.

Usage: proctree_dataloader.py fork|forkserver. Iterates forever over a dataset whose items take 50 ms,
so the workers stay alive and mostly idle. With forkserver the workers are children of the forkserver
process, grandchildren of this one.
"""

from __future__ import annotations

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowItems(Dataset):
    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.05)
        return torch.zeros(4)


def main() -> None:
    loader = DataLoader(SlowItems(), batch_size=2, num_workers=2, multiprocessing_context=sys.argv[1])
    for _ in loader:
        pass


if __name__ == "__main__":
    main()
