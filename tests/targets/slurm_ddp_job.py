"""Target: ddp_job.py's training (straggler or deadlock) as one task of a Slurm step, the way Slurm jobs are
written: Slurm gives the task SLURM_PROCID, SLURM_LOCALID and SLURM_NTASKS but no RANK or WORLD_SIZE, so the
script copies them into os.environ for torch's env:// rendezvous (MASTER_ADDR/PORT come from the job script).
Setting os.environ changes the process's own copy only: /proc/PID/environ keeps what Slurm gave, so gputop
must find the job from Slurm's variables.

Run with ``srun -n 2 python slurm_ddp_job.py MODE``; task 0 prints "ready" once both tasks have stepped together.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ddp_job  # a sibling target, found through the line above


def main() -> None:
    mode = sys.argv[1]
    os.environ["RANK"] = os.environ["SLURM_PROCID"]
    os.environ["LOCAL_RANK"] = os.environ["SLURM_LOCALID"]
    os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
    ddp_job.train(mode)


if __name__ == "__main__":
    main()
