"""Target: a two-task gloo job under srun whose task 1 exits with status 1 after a few steps while task 0 waits for
it in all_reduce, the way a rank that died on another node leaves the job.

Ranks come from Slurm's variables (SLURM_PROCID, SLURM_NTASKS), as in slurm_ddp_job.py; MASTER_ADDR/PORT and
GLOO_SOCKET_IFNAME come from the job script. Task 0 prints "ready" once both have stepped together; task 1
prints "exiting" and ends with os._exit(1) at step EXIT_STEP.

On CPU, gloo notices a closed connection at once: task 0 would fail its all_reduce with "Connection closed by
peer" and the job would end. With NCCL on GPUs a peer's death leaves the others waiting until the collective
timeout; here the same wait comes from what a crashed rank's child often does: before exiting, task 1 leaves a
detached helper (its own session, stdin/stdout/stderr on /dev/null, so srun still hears of the task's end) that
holds the task's connections open for HELPER_SECONDS. The test kills it by its PID inside the node.
"""

from __future__ import annotations

import os
import sys
import time

EXIT_STEP = 3
HELPER_SECONDS = 900.0  # a bound: the test kills the helper, and the node's end kills it anyway


def leave_helper() -> None:
    """Fork a helper detached from the task (double fork, new session, stdio on /dev/null) that keeps the
    task's open sockets until it is killed or HELPER_SECONDS pass."""
    if os.fork() != 0:
        os.wait()
        return
    os.setsid()
    if os.fork() != 0:
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    time.sleep(HELPER_SECONDS)
    os._exit(0)


def main() -> None:
    os.environ["RANK"] = os.environ["SLURM_PROCID"]
    os.environ["LOCAL_RANK"] = os.environ["SLURM_LOCALID"]
    os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    total = torch.ones(4)
    step = 0
    while True:
        dist.all_reduce(total)
        if step == 1 and rank == 0:
            print("ready", flush=True)
        if step == EXIT_STEP and rank == 1:
            leave_helper()
            print("exiting", flush=True)
            os._exit(1)
        step += 1
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
