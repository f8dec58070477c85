"""Target: a training loop under a real tqdm bar (drawn on stderr, into the log) whose steps are uneven.

Usage: tqdm_stalls.py --truth FILE [--step-s S] [--stall-s S] [--every N]
Each step runs a real forward, backward and optimizer step of a tiny torch model and lasts --step-s by the clock;
every --every-th step also stalls --stall-s (an evaluation, a checkpoint, a slow shard). tqdm's rate is its own
moving average of its redraws, so it shows mostly the fast steps, and the pace the bar's counter moves at over a
window is slower. Each step's end (wall time and step) goes to --truth, one ``time step`` pair a line.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from tqdm import tqdm


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--truth", required=True)
    parser.add_argument("--step-s", type=float, default=0.05)
    parser.add_argument("--stall-s", type=float, default=1.0)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--steps", type=int, default=100_000)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Embedding(64, 32), nn.Linear(32, 64))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with open(args.truth, "a", encoding="utf-8") as truth, tqdm(total=args.steps) as bar:
        truth.write(f"{time.time()} 0\n")  # the bar is drawn at 0 as it is made
        truth.flush()
        for step in range(1, args.steps + 1):
            began = time.perf_counter()
            batch = torch.randint(0, 64, (4, 16))
            loss = nn.functional.cross_entropy(model(batch).reshape(-1, 64), batch.reshape(-1))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            until = began + args.step_s + (args.stall_s if step % args.every == 0 else 0.0)
            time.sleep(max(0.0, until - time.perf_counter()))
            truth.write(f"{time.time()} {step}\n")
            truth.flush()
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)


if __name__ == "__main__":
    main()
