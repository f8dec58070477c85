"""Target: a CPU-only training loop (an MLP on random data): host compute is the limit.

Usage: diag_cpu_train.py [--seconds S] [--threads N]. Prints "ready" after the first step.
"""

from __future__ import annotations

import argparse
import time

import torch


def train_step(model, optimizer, batch: torch.Tensor) -> float:
    loss = model(batch).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randn(256, 512)
    end = time.monotonic() + args.seconds
    step = 0
    while time.monotonic() < end:
        train_step(model, optimizer, batch)
        if step == 0:
            print("ready", flush=True)
        step += 1


if __name__ == "__main__":
    main()
