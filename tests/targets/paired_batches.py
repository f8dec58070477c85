"""Target: a loop that prints each whole iteration's time while two DataLoader workers hand it batches in pairs.

Usage: paired_batches.py [--item-s S] [--workers N]
Each worker takes --item-s to make a batch (it sleeps: the wait is what matters, not the CPU), so with two workers
the batches come two at a time: the first of a pair waits for the workers, the second is ready at once. The main loop
runs a real forward, backward and optimizer step of a tiny torch model and prints, as a new user's loop would,
``step N loss X time Yms`` with the time since the previous line: the whole iteration, data loading included. The
printed times alternate (~--item-s, then a few ms) and average to the pace the step counter moves at.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    def __init__(self, item_seconds: float) -> None:
        self.item_seconds = item_seconds

    def __len__(self) -> int:
        return 10**9  # one epoch outlives any test

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.item_seconds)
        return torch.randint(0, 64, (16,))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--item-s", type=float, default=0.6)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Embedding(64, 32), nn.Linear(32, 64))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(SlowDataset(args.item_s), batch_size=1, num_workers=args.workers)
    last = time.perf_counter()
    for step, batch in enumerate(loader, start=1):
        logits = model(batch)
        loss = nn.functional.cross_entropy(logits.reshape(-1, 64), batch.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        now = time.perf_counter()
        print(f"step {step} loss {loss.item():.4f} time {(now - last) * 1000:.1f}ms", flush=True)
        last = now


if __name__ == "__main__":
    main()
