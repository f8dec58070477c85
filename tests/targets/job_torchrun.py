"""Target: torchrun over job_train.py, exec'd, so this PID is torchrun's agent (as `torchrun ...` would be).

Usage: job_torchrun.py MASTER_PORT NPROC MAX_RESTARTS [job_train.py arguments...]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

port, nproc, max_restarts, *train_args = sys.argv[1:]
os.execv(sys.executable, [
    sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", nproc, "--master_addr", "127.0.0.1",
    "--master_port", port, "--max-restarts", max_restarts, str(Path(__file__).with_name("job_train.py")),
    *train_args,
])
