"""Target: a 2-rank gloo job (CPU, no model) to be started by a real launcher: accelerate launch, torchrun,
python -m torch.distributed.launch, mpirun, uv run, or the DeepSpeed-shaped tree (tests/targets/deepspeed_shape/).

Usage: launcher_job.py MODE [--local_rank=N | --local-rank=N]   (the argument the old launchers append; ignored)

- steady: every rank all-reduces a small tensor in a loop; rank 0 prints "ready" after the first one.
- gone: rank 1 leaves right after init_process_group (exit 0, so its launcher reaps it and keeps the job);
  once it is reaped, rank 0 prints "waiting", then waits in all_reduce for it until the collective timeout
  (see gone()).

Ranks come from torch's variables, or from MPI's (Open MPI's OMPI_COMM_WORLD_*), mapped in-process as MPI users
do: /proc/PID/environ still shows only what the launcher set.
"""

from __future__ import annotations

import os
import sys
import time


def gone(rank: int, store) -> None:
    """Rank 1 leaves (rank 0 returns once it is reaped). A dead peer's closed sockets would make gloo's
    collective fail at once ("Connection closed by peer"), where NCCL's waits until the timeout: a child forked
    by rank 1 keeps its sockets open (as a leaked worker that inherited them would) until rank 0 is gone."""
    if rank == 0:
        store.set("pid_0", str(os.getpid()))
        gone_pid = int(store.get("pid_1"))
        while os.path.exists(f"/proc/{gone_pid}"):
            time.sleep(0.05)
        print("waiting", flush=True)
        return
    rank0_pid = int(store.get("pid_0"))
    keeper = os.fork()
    if keeper == 0:
        while os.path.exists(f"/proc/{rank0_pid}"):
            time.sleep(0.2)
        os._exit(0)
    print(f"rank 1 leaves; PID {keeper} holds its sockets", flush=True)
    store.set("pid_1", str(os.getpid()))
    os._exit(0)  # no interpreter teardown: the process group's shutdown would close the connections


def main(mode: str) -> None:
    if "RANK" not in os.environ and "OMPI_COMM_WORLD_RANK" in os.environ:
        os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
        os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    if mode == "gone":
        gone(rank, dist.distributed_c10d._get_default_store())
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
