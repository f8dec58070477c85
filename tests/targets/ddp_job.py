"""Target: a 2-rank DDP training job on gloo (CPU, a tiny model), one of three ways of being slow or stuck.

Run it under torchrun (``ddp_job.py --launch MODE`` execs ``python -m torch.distributed.run --nproc_per_node 2
--master_port <free port> ddp_job.py MODE``, so the PID the test holds is torchrun's own agent):

- straggler: rank 1 runs a slow Python function (slow_augment) before each step; rank 0 waits for it in DDP's
  gradient all-reduce inside backward.
- deadlock: after a few steps rank 1 takes its metrics lock twice in flush_metrics and never returns; rank 0
  goes on to the explicit all_reduce of the step's loss and waits there for it.
- data_starved: both ranks read batches from a DataLoader whose one worker (--workers N: N alike workers) is
  slow; both wait for data.

Rank 0 prints "ready" once both ranks have finished a step together.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(mode: str, workers: int) -> None:
    port = free_port()
    os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                              "--master_addr", "127.0.0.1", "--master_port", str(port), __file__, mode,
                              "--workers", str(workers)])


metrics_lock = threading.Lock()


def slow_augment(batch, rounds: int = 1_000_000):
    """Pure-Python work on the batch, the kind that makes one rank slower than the others."""
    total = 0.0
    for i in range(rounds):
        total += (i % 7) * 0.5
    return batch + total * 0.0


def flush_metrics(step: int) -> None:
    """Writes the step's metrics; from the fourth step on it takes its lock twice (a non-reentrant Lock): a
    self-deadlock, as when a helper called under the lock takes it again."""
    with metrics_lock:
        if step >= 3:
            metrics_lock.acquire()


def train(mode: str, workers: int = 1) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, Dataset

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                                        torch.nn.Linear(64, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    class SlowDataset(Dataset):
        def __len__(self):
            return 1_000_000

        def __getitem__(self, index):
            time.sleep(0.05)  # a slow read or decode per sample
            return torch.randn(32), torch.randn(1)

    if mode == "data_starved":
        loader = iter(DataLoader(SlowDataset(), batch_size=8, num_workers=workers))

        def next_batch():
            return next(loader)
    else:
        def next_batch():
            return torch.randn(8, 32), torch.randn(8, 1)

    step = 0
    while True:
        inputs, targets = next_batch()
        if mode == "straggler" and rank == 1:
            inputs = slow_augment(inputs)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if mode == "deadlock":
            if rank == 1:
                flush_metrics(step)
            dist.all_reduce(loss.detach())
        if step == 1 and rank == 0:
            print("ready", flush=True)
        step += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("straggler", "deadlock", "data_starved"))
    parser.add_argument("--launch", action="store_true", help="exec torchrun with 2 ranks of this script")
    parser.add_argument("--workers", type=int, default=1, help="DataLoader workers per rank (data_starved)")
    args = parser.parse_args()
    if args.launch:
        launch(args.mode, args.workers)
    train(args.mode, args.workers)


if __name__ == "__main__":
    main()
