"""Target: a small torchrun job (gloo, CPU): each rank all-reduces a tensor a few times a second until a stop
file appears, then all ranks leave together and the job ends.

Usage: python -m torch.distributed.run --nproc_per_node 2 --master_port PORT exporter_ddp_job.py STOP_FILE
Each rank prints "rank R ready" once the process group is up.
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist


def train_step_for_gputop(weights: torch.Tensor) -> None:
    gradient = torch.randn_like(weights)
    dist.all_reduce(gradient)
    weights -= 0.001 * gradient / dist.get_world_size()


def main() -> None:
    stop_file = sys.argv[1]
    dist.init_process_group("gloo")
    print(f"rank {dist.get_rank()} ready", flush=True)
    weights = torch.zeros(10_000)
    while True:
        train_step_for_gputop(weights)
        # Every rank must leave at the same step, or the others wait in all_reduce for ever: agree on it.
        stop = torch.tensor([1.0 if os.path.exists(stop_file) else 0.0])
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        if stop.item():
            break
        time.sleep(0.1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
