"""Target: a loop that mostly saves checkpoints: one short step, then torch.save of a ~200 MB state dict
twice (last.pt and best.pt, as many training scripts do).

Usage: diag_checkpoint.py DIR. Writes DIR/last.pt and DIR/best.pt over and over. Prints "ready" after the
first step.
"""

from __future__ import annotations

import argparse
import os

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(12)])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    last = os.path.join(args.directory, "last.pt")
    best = os.path.join(args.directory, "best.pt")
    step = 0
    while True:
        loss = model(torch.randn(4, 2048)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        state = {"model": model.state_dict(), "step": step}
        torch.save(state, last)
        torch.save(state, best)
        if step == 0:
            print("ready", flush=True)
        step += 1


if __name__ == "__main__":
    main()
