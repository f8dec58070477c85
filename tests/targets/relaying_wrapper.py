"""Target: a Python wrapper that starts a training script and relays its stderr on its main thread until it ends,
as `accelerate launch` of one process does since accelerate 1.16 (its _run_subprocess: a pipe read, not wait4).

Usage: relaying_wrapper.py SCRIPT [ARGS...]
"""

from __future__ import annotations

import subprocess
import sys

child = subprocess.Popen([sys.executable, *sys.argv[1:]], stderr=subprocess.PIPE)
assert child.stderr is not None
while chunk := child.stderr.read1(65536):
    sys.stderr.buffer.write(chunk)
    sys.stderr.flush()
sys.exit(child.wait())
