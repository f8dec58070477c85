"""Target: torchrun itself, started the way spawn_target starts targets (its PID is the launcher's: exec).

Usage: exporter_torchrun.py TORCHRUN-ARGS... (e.g. --nproc_per_node 2 --master_port P job.py ARGS).
"""

import os
import sys

os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", *sys.argv[1:]])
