"""Target: one rank of a 2-rank gloo job started by hand, as tutorials do (no launcher):

    MASTER_ADDR=127.0.0.1 MASTER_PORT=<port> WORLD_SIZE=2 RANK=0 python hand_started_rank.py HELPER &
    MASTER_ADDR=127.0.0.1 MASTER_PORT=<port> WORLD_SIZE=2 RANK=1 python hand_started_rank.py HELPER &

Every rank all-reduces a small tensor in a loop and prints "rank N ready PID P" after its first all_reduce.
HELPER says what rank 1 leaves behind when it is killed (rank 0 ignores it):

- none: nothing. A killed rank's sockets close, and gloo fails rank 0's all_reduce at once ("Connection closed
  by peer"): no hang to watch, unless rank 1 dies before it joins (see `late`).
- sleep: before its loop rank 1 runs `sleep 600 &` through the shell (os.system), as a job's helper command
  would; the shell's child inherits gloo's sockets (they are not close-on-exec), so once rank 1 is killed the
  `sleep` holds its connection open and rank 0 waits in all_reduce until the collective timeout.
- fork: rank 1 forks a Python child that sleeps (as a forked helper of a rank would): it holds the sockets the
  same way, and carries rank 1's command line and environment.
- late: rank 1 prints "rank 1 starting PID P" and sleeps before init_process_group (a slow start), to be
  killed before it joins: rank 0 waits in init_process_group's rendezvous for it.

The helper's PID is printed ("helper PID P"), for the test to end it: it outlives rank 1.
"""

from __future__ import annotations

import os
import sys
import time

HELPER_SLEEP_S = 600


def start_helper(kind: str) -> None:
    if kind == "sleep":
        # os.system, not subprocess (which closes every inherited descriptor): the shell and its `sleep` get
        # rank 1's descriptors as a helper command would. `$!` names the sleep; the shell exits at once.
        sys.stdout.flush()
        os.system(f"sleep {HELPER_SLEEP_S} >/dev/null 2>&1 & echo helper PID $!")
    elif kind == "fork":
        child = os.fork()
        if child == 0:
            time.sleep(HELPER_SLEEP_S)
            os._exit(0)
        print(f"helper PID {child}", flush=True)


def main(helper: str) -> None:
    rank = int(os.environ["RANK"])
    if rank == 1 and helper == "late":
        print(f"rank 1 starting PID {os.getpid()}", flush=True)
        time.sleep(HELPER_SLEEP_S)
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if rank == 1:
        start_helper(helper)
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    print(f"rank {rank} ready PID {os.getpid()}", flush=True)
    while True:
        dist.all_reduce(tensor)
        time.sleep(0.05)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "none")
