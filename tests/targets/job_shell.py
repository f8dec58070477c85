"""Target: `bash job_train.sh ARGS`, exec'd so this PID is the shell's (the fixture starts Python scripts).

Usage: job_shell.py [job_train.py arguments...]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["PYTHON"] = sys.executable
os.execvp("bash", ["bash", str(Path(__file__).with_name("job_train.sh")), *sys.argv[1:]])
