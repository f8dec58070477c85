"""Target: a 2-rank DDP training job on gloo (CPU, a tiny model), one of three ways of being slow or stuck.

Run it under torchrun (``ddp_job.py --launch MODE`` execs ``python -m torch.distributed.run --nproc_per_node 2
--master_port <free port> ddp_job.py MODE``, so the PID the test holds is torchrun's own agent):

- straggler: rank 1 runs a slow Python function (slow_augment) before each step; rank 0 waits for it in DDP's
  gradient all-reduce inside backward.
- deadlock: after a few steps rank 1 takes its metrics lock twice in flush_metrics and never returns; rank 0
  goes on to the explicit all_reduce of the step's loss and waits there for it.
- data_starved: both ranks read batches from a DataLoader whose one worker (--workers N: N alike workers) is
  slow; both wait for data.

Rank 0 prints "ready" once both ranks have finished a step together. SIGUSR1 makes a rank read address 0 (a real
SIGSEGV).

As "two nodes" on this one machine (tests/e2e/test_cluster_e2e.py): ``ddp_job.py --launch-node K --nnodes 2
--master-port P --slow-rank 3 straggler`` execs torchrun with ``--nnodes 2 --node_rank K --nproc_per_node 2``
and a static rendezvous at 127.0.0.1:P; the two launchers together make a 4-rank job, ranks 2 and 3 on node 1.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import sys
import threading
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(mode: str, slow_rank: int, workers: int = 1, node_rank: int | None = None, nnodes: int = 1,
           port: int | None = None) -> None:
    nodes = ["--nnodes", str(nnodes), "--node_rank", str(node_rank)] if node_rank is not None else []
    os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", *nodes, "--nproc_per_node", "2",
                              "--master_addr", "127.0.0.1", "--master_port", str(port or free_port()), __file__,
                              mode, "--slow-rank", str(slow_rank), "--workers", str(workers)])


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


def train(mode: str, slow_rank: int = 1, workers: int = 1) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, Dataset

    torch.set_num_threads(1)
    # SIGUSR1 makes a rank read address 0: a real segfault, as a bug in native code makes one (why it died, issue 40).
    signal.signal(signal.SIGUSR1, lambda *_: ctypes.string_at(0))
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
        if mode == "straggler" and rank == slow_rank:
            inputs = slow_augment(inputs)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if mode == "deadlock":
            if rank == slow_rank:
                flush_metrics(step)
            dist.all_reduce(loss.detach())
        if step == 1 and rank == 0:
            print("ready", flush=True)
        step += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("straggler", "deadlock", "data_starved"))
    parser.add_argument("--launch", action="store_true", help="exec torchrun with 2 ranks of this script")
    parser.add_argument("--slow-rank", type=int, default=1, help="the straggler, or the rank that deadlocks")
    parser.add_argument("--launch-node", type=int, default=None, metavar="K",
                        help="exec torchrun as node K of --nnodes (2 ranks each) at 127.0.0.1:--master-port")
    parser.add_argument("--nnodes", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1, help="DataLoader workers per rank (data_starved)")
    parser.add_argument("--master-port", type=int, default=None)
    args = parser.parse_args()
    if args.launch:
        launch(args.mode, args.slow_rank, args.workers)
    if args.launch_node is not None:
        launch(args.mode, args.slow_rank, args.workers, args.launch_node, args.nnodes, args.master_port)
    train(args.mode, args.slow_rank, args.workers)


if __name__ == "__main__":
    main()
