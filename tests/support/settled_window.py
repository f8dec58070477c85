"""The monitor's py-spy record window on a target at the settled rate, read from the monitor's child processes: the
phase-change tests switch their target at a known point of that window."""

from __future__ import annotations

import time

import psutil

from probes.sampling.sampling_policy import SETTLED_RATE_HZ


def settled_window(monitor_pid: int, target_pid: int) -> tuple[int, float] | None:
    """(py-spy's PID, how long it has run) of the monitor's record window on the target, if it runs at the settled
    rate; None otherwise."""
    try:
        children = psutil.Process(monitor_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return None
    for child in children:
        try:
            argv, started = child.cmdline(), child.create_time()
        except psutil.Error:
            continue
        if "record" in argv and argv[argv.index("--pid") + 1] == str(target_pid) and \
                float(argv[argv.index("--rate") + 1]) == SETTLED_RATE_HZ:
            return child.pid, time.time() - started
    return None
