"""A 2-rank DDP training loop (gloo, CPU, a tiny model) in which one rank does extra CPU work each step, so the
other waits for it in the gradient all-reduce: the straggler case the TUI's Ranks pane is looked at with.

    python -m torch.distributed.run --nproc_per_node 2 --master_port PORT tests/targets/tui_ddp_straggler.py \
        --slow-rank 1 [--slow-seconds 0.3] [--steps N]

Each rank prints "rank R step N" after every step (flushed), so a test can wait for steps rather than time.
Runs until --steps are done (default: until killed).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

torch.set_num_threads(1)  # two ranks on a 2-core machine: intra-op threads would only fight each other


def slow_preprocess(batch: torch.Tensor, seconds: float) -> torch.Tensor:
    """The straggler's extra work: pure-Python CPU time, visible in its stacks as this function."""
    deadline = time.process_time() + seconds
    total = 0
    while time.process_time() < deadline:
        total += sum(i * i for i in range(200))
    return batch + (total % 2)


def train_step(model, optimizer, batch: torch.Tensor, slow: bool, slow_seconds: float) -> float:
    if slow:
        batch = slow_preprocess(batch, slow_seconds)
    optimizer.zero_grad()
    loss = model(batch).square().mean()
    loss.backward()  # DDP's all-reduce runs from here: the fast rank waits for the slow one
    optimizer.step()
    return float(loss)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--slow-rank", type=int, default=1)
    parser.add_argument("--slow-seconds", type=float, default=0.3)
    parser.add_argument("--steps", type=int, default=0, help="0: run until killed")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                                        torch.nn.Linear(256, 256)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = torch.randn(32, 256)
    step = 0
    while args.steps == 0 or step < args.steps:
        train_step(model, optimizer, batch, rank == args.slow_rank, args.slow_seconds)
        step += 1
        print(f"rank {rank} step {step} pid {os.getpid()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
