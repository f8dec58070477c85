"""Target: a 2-rank gloo job (CPU, no model) to be started by a real launcher: accelerate launch, torchrun,
python -m torch.distributed.launch, mpirun, uv run, or the DeepSpeed-shaped tree (tests/targets/deepspeed_shape/).

Usage: launcher_job.py MODE [--local_rank=N | --local-rank=N]   (the argument the old launchers append; ignored)

- steady: every rank all-reduces a small tensor in a loop; rank 0 prints "ready" after the first one.
- gone: rank 1 leaves right after init_process_group (exit 0, so its launcher reaps it and keeps the job);
  rank 0 prints "waiting", then waits in all_reduce for it. Run with TORCH_GLOO_LAZY_INIT=1: with gloo's
  eager connections a peer's exit makes the collective fail at once ("Connection closed by peer"), lazily the
  pair was never connected and rank 0 waits, as an NCCL job would, until the collective timeout.

Ranks come from torch's variables, or from MPI's (Open MPI's OMPI_COMM_WORLD_*), mapped in-process as MPI users
do: /proc/PID/environ still shows only what the launcher set.
"""

from __future__ import annotations

import os
import sys
import time


def main(mode: str) -> None:
    if "RANK" not in os.environ and "OMPI_COMM_WORLD_RANK" in os.environ:
        os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
        os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if mode == "gone":
        if rank != 0:
            sys.exit(0)
        print("waiting", flush=True)
        dist.all_reduce(torch.ones(1))
        return
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    if rank == 0:
        print("ready", flush=True)
    while True:
        dist.all_reduce(tensor)
        time.sleep(0.05)


if __name__ == "__main__":
    main(next(arg for arg in sys.argv[1:] if not arg.startswith("--local")))
