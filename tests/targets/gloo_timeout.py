"""Target: a 2-rank job on gloo (CPU) whose collectives time out after 10 s, for the test that stops one rank.

Run it under torchrun (``gloo_timeout.py --launch`` execs ``python -m torch.distributed.run --nproc_per_node 2
--master_port <free port> gloo_timeout.py``, so the PID the test holds is torchrun's own agent). Each rank
all-reduces a small tensor in a loop and prints a step line; each prints "rank R pid P" once both have finished a
step together. The test stops one rank (SIGSTOP): the other's next all_reduce waits for it and, after the process
group's 10 s timeout, gloo raises ("Timed out waiting 10000ms for recv operation to complete"), uncaught: that rank
exits with status 1 and its traceback on stderr, and torchrun stops the other and prints its failure table.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from datetime import timedelta

TIMEOUT_S = 10


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(port: int | None) -> None:
    os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                              "--master_addr", "127.0.0.1", "--master_port", str(port or free_port()), __file__])


def train() -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT_S))
    rank = dist.get_rank()
    value = torch.ones(256)
    step = 0
    while True:
        dist.all_reduce(value)
        value.fill_(1.0)
        step += 1
        # Each line one write: the two ranks share the log, and print()'s text and newline as two writes interleaved
        # ("rank 0 pid 41rank 1 pid 42"), which the test could not read.
        if step == 1:
            sys.stdout.write(f"rank {rank} pid {os.getpid()}\n")
            sys.stdout.flush()
        if step % 10 == 0:
            sys.stdout.write(f"step {step} | loss {1.0 / step:.4f}\n")
            sys.stdout.flush()
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--launch", action="store_true", help="exec torchrun with 2 ranks of this script")
    parser.add_argument("--master-port", type=int, default=None)
    args = parser.parse_args()
    if args.launch:
        launch(args.master_port)
    else:
        train()


if __name__ == "__main__":
    main()
