"""Target: a PyTorch Lightning DDP job as a user runs it (``python lightning_ddp.py MODE``): Lightning's
subprocess launcher makes this process rank 0 and starts rank 1 as its child; two CPU ranks sync through gloo.
A tiny model, a synthetic dataset; the job runs until it is killed.

- straggler: rank 1's Dataset runs slow_augment on every sample (pure Python, in the rank's main thread, as
  with ``num_workers=0``); rank 0 waits for it in DDP's gradient all-reduce inside backward.
- hung: from its fourth step rank 1 blocks forever in training_step (wait_for_shared_lock), before backward, so
  rank 0 waits in the gradient all-reduce for a peer that never comes. Each rank has one DataLoader worker.

Rank 0 prints "ready" once both ranks have finished two steps together. Set MASTER_PORT to a free port.
"""

from __future__ import annotations

import sys
import threading

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset

HANG_AT_STEP = 3


def slow_augment(sample: torch.Tensor, rounds: int = 250_000) -> torch.Tensor:
    """Pure-Python work on one sample, the kind that makes one rank slower than the others."""
    total = 0.0
    for i in range(rounds):
        total += (i % 7) * 0.5
    return sample + total * 0.0


def wait_for_shared_lock() -> None:
    """A lock nobody releases: the rank blocks here for ever."""
    threading.Event().wait()


class SyntheticDataset(Dataset):
    def __init__(self, augment: bool) -> None:
        self.augment = augment

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int):
        sample = torch.randn(32)
        if self.augment:
            sample = slow_augment(sample)
        return sample, torch.randn(1)


class TinyRegression(pl.LightningModule):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

    def training_step(self, batch, batch_idx):
        if self.mode == "hung" and self.global_rank == 1 and self.global_step >= HANG_AT_STEP:
            wait_for_shared_lock()
        inputs, targets = batch
        loss = torch.nn.functional.mse_loss(self.net(inputs), targets)
        self.log("train_loss", loss)
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx):
        if self.global_step == 2 and self.global_rank == 0:
            print("ready", flush=True)

    def train_dataloader(self):
        augment = self.mode == "straggler" and self.global_rank == 1
        # The straggler augments in the rank's own main thread (its stacks show it); the hung job gives each rank a
        # DataLoader worker, a child of its rank as rank 1 is a child of rank 0.
        return DataLoader(SyntheticDataset(augment), batch_size=4, num_workers=1 if self.mode == "hung" else 0)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> None:
    mode = sys.argv[1]
    if mode not in ("straggler", "hung"):
        sys.exit(f"usage: {sys.argv[0]} straggler|hung")
    torch.set_num_threads(1)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=-1, max_epochs=-1,
                         enable_model_summary=False)
    trainer.fit(TinyRegression(mode))


if __name__ == "__main__":
    main()
