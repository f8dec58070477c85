"""Target: a tiny training loop, launched the ways jobs are launched (tests/unit/test_jobs.py).

Usage: job_train.py [--workers N] [--step-ms MS] [--fail-rank R --fail-when PATH]   one process, or a rank
       job_train.py --spawn N --master-port PORT [...]                 torch.multiprocessing.spawn, N ranks

With RANK in its environment (torchrun sets it) or under --spawn, each rank trains a small MLP under DDP
(gloo, CPU); otherwise the one process trains it alone. Batches come from a synthetic dataset through --workers
DataLoader workers (fork). Trains until killed, sleeping --step-ms per step so a 2-core machine keeps up. With
--fail-rank R, rank R exits with status 3 on torchrun's first attempt (TORCHELASTIC_RESTART_COUNT 0) once
the file --fail-when exists (the test creates it when it has seen that attempt), so torchrun --max-restarts 1
restarts the ranks. Prints "ready RANK PID" after its first step. With --progress PATH, rank 0 (or the one process)
writes "STEPS TIME" there after each step (benchmarks/node_overhead.py reads the job's pace from it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset


class SyntheticDataset(Dataset):
    def __len__(self) -> int:
        return 10**9  # one epoch outlives any test: workers are never restarted

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(index)
        return torch.randn(32, generator=generator), torch.randn(1, generator=generator)


def train_step_for_gputop(model, optimizer, x, y) -> float:
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def train(rank: int | None, world_size: int, args: argparse.Namespace, init_method: str | None = None) -> None:
    torch.set_num_threads(1)
    model: nn.Module = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    if rank is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        if init_method is None:  # torchrun's environment says where and who
            # torchrun's agent hosts the store at MASTER_ADDR:MASTER_PORT and keeps it across restarts; torch 2.13
            # adds no per-attempt prefix, so a restarted rank may read the address of the rank it replaces and
            # gloo's connect is refused. A prefix per attempt keeps the attempts apart.
            store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                                  timeout=timedelta(minutes=5))
            attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt_{attempt}", store), rank=rank,
                                    world_size=world_size)
        else:
            dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world_size)
        model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SyntheticDataset(), batch_size=16, num_workers=args.workers,
                        persistent_workers=args.workers > 0)
    failing = rank == args.fail_rank and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"
    for step, (x, y) in enumerate(loader, start=1):
        train_step_for_gputop(model, optimizer, x, y)
        if step == 1:
            print(f"ready {rank if rank is not None else 0} {os.getpid()}", flush=True)
        if failing and os.path.exists(args.fail_when):
            print(f"rank {rank} fails on purpose (first attempt)", file=sys.stderr, flush=True)
            os._exit(3)
        if args.progress and not rank:
            _write_progress(args.progress, step)
        time.sleep(args.step_ms / 1000)


def _write_progress(path: str, step: int) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as handle:
        handle.write(f"{step} {time.time()}")
    os.replace(tmp, path)  # a reader never sees half a line


def spawned_rank(index: int, world_size: int, args: argparse.Namespace) -> None:
    train(index, world_size, args, init_method=f"tcp://127.0.0.1:{args.master_port}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--fail-when", default="", metavar="PATH")
    parser.add_argument("--spawn", type=int, default=0, metavar="N")
    parser.add_argument("--master-port", type=int, default=None)
    parser.add_argument("--progress", default="", metavar="PATH")
    args = parser.parse_args()
    if args.spawn:
        import torch.multiprocessing as mp

        mp.spawn(spawned_rank, args=(args.spawn, args), nprocs=args.spawn)
    elif "RANK" in os.environ:
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
    else:
        train(None, 1, args)


if __name__ == "__main__":
    main()
