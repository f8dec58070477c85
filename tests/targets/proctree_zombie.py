"""Target: forks a child that exits at once and is never reaped, so it stays a zombie. Prints its PID."""

import os
import time

child = os.fork()
if child == 0:
    os._exit(3)
print(child, flush=True)
time.sleep(120)
