"""The monitor's py-spy record window on a target at the settled rate, read from the monitor's child processes: the
phase-change tests switch their target at a known point of that window."""

from __future__ import annotations

import time

import psutil

from probes.sampling.sampling_policy import SETTLED_RATE_HZ


def settled_window(monitor_pid: int, target_pid: int) -> tuple[int, float] | None:
    """(py-spy's PID, how long it has run) of the monitor's record window on the target, if it runs at the settled
    rate; None otherwise. A window is a pair of py-spys (one with --idle, one without, started together): the one
    with --idle stands for it, so that the same window always gives the same PID (taking whichever half came first
    in the list made one window look like two, and the test took an 8.6 s old window for one of 2 s)."""
    try:
        children = psutil.Process(monitor_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return None
    windows = []
    for child in children:
        try:
            argv, started = child.cmdline(), child.create_time()
        except psutil.Error:
            continue
        if "record" in argv and "--idle" in argv and argv[argv.index("--pid") + 1] == str(target_pid) and \
                float(argv[argv.index("--rate") + 1]) == SETTLED_RATE_HZ:
            windows.append((started, child.pid))
    if not windows:
        return None
    started, pid = max(windows)  # a window a wake cut may still be writing beside the next one
    return pid, time.time() - started
