"""Gloo ranks started by hand, as tutorials do (``MASTER_ADDR=127.0.0.1 MASTER_PORT=... WORLD_SIZE=2 RANK=N python
train.py &``): tests/targets/hand_started_rank.py in a shell of its own session, one shell for both ranks or one
per rank (two terminals), each rank's output in its own log, from which its PID is read."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psutil

from support.paths import REPO, TARGETS

RANK = str(TARGETS / "hand_started_rank.py")


def by_hand(helper: str, port: int, folder: Path, ranks: str = "0 1") -> subprocess.Popen:
    """The ranks as a tutorial starts them, each `RANK=N python hand_started_rank.py HELPER &` of one shell (in its
    own session), rank N's output in folder/rN.log."""
    line = 'RANK={0} "$PYTHON" "$RANK_SCRIPT" {1} > "$LOGS/r{0}.log" 2>&1 &'
    script = " ".join(line.format(rank, helper) for rank in ranks.split()) + " wait"
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", PYTHON=sys.executable,
               RANK_SCRIPT=RANK, LOGS=str(folder), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2")
    return subprocess.Popen(["bash", "-c", script], env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def logged_pid(log: Path, pattern: str) -> int | None:
    """The PID a rank's log names in `pattern`'s group ("rank 1 ready PID (\\d+)"); None before it says so."""
    found = re.search(pattern, log.read_text()) if log.exists() else None
    return int(found.group(1)) if found else None


def gone(pid: int) -> bool:
    """Whether the process has ended (a zombie counts as ended)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
