"""Target: a training loop fed by a torch DataLoader whose workers copy their parent's pages by only reading them.

The dataset is held as a list of Python strings (--objects of them), the case PyTorch's issue 13246 describes: each
forked worker reads the items of its batches, and reading a Python object writes its reference count, so each page of
the parent's list it reaches becomes its own copy (copy-on-read). The main loop takes --per-second items a second
through --workers persistent workers, in order, and does a little work on each batch. Prints "workers <pids>" once
they run; runs until --seconds pass.
"""

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Strings(Dataset):
    def __init__(self, count: int) -> None:
        self.items = [f"sample-{i:012d}-of-the-dataset" for i in range(count)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> int:
        return len(self.items[index])  # a read: only the reference count is written


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=3_000_000)
    parser.add_argument("--per-second", type=int, default=40_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=150.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    loader = DataLoader(Strings(args.objects), batch_size=args.batch, num_workers=args.workers,
                        persistent_workers=True, prefetch_factor=2)
    start = time.time()
    seen = 0
    announced = False
    while time.time() - start < args.seconds:
        for batch in loader:
            if not announced:
                pids = [w.pid for w in loader._iterator._workers]  # type: ignore[union-attr]
                print("workers " + " ".join(map(str, pids)), flush=True)
                announced = True
            seen += len(batch)
            torch.mm(torch.ones(64, 64), torch.ones(64, 64))  # a step's work
            ahead = seen / args.per_second - (time.time() - start)
            if ahead > 0:
                time.sleep(ahead)
            if time.time() - start >= args.seconds:
                break


if __name__ == "__main__":
    main()
