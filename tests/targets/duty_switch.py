"""One line, ``work_or_wait``, that works part of each 100 ms cycle and waits the rest: 20% of each cycle until the
file SWITCH exists, then 80%. Its work is a pure-Python loop (holds the GIL, running or runnable), its wait
time.sleep (asleep). TRUTH gets one line per cycle: when it began (time.time()), the seconds it worked, the
seconds it waited, and the share of the cycle it meant to work (0.2 or 0.8: a cycle crowded off its core works
longer than it meant to). The end-to-end test of the measured waiting share (tests/e2e/test_idle_share_e2e.py) compares
gputop's idle share of the main thread over each record window with this log.

usage: duty_switch.py TRUTH SWITCH
"""

from __future__ import annotations

import os
import sys
import time

CYCLE_S = 0.1


def work_or_wait(share: float) -> tuple[float, float]:
    started = time.perf_counter()
    deadline = started + share * CYCLE_S
    while time.perf_counter() < deadline:
        pass
    worked = time.perf_counter()
    time.sleep(max(0.0, started + CYCLE_S - worked))
    return worked - started, time.perf_counter() - worked


def main() -> None:
    truth_path, switch_path = sys.argv[1], sys.argv[2]
    share = 0.2
    with open(truth_path, "w", encoding="utf-8") as truth:
        while True:
            if share < 0.8 and os.path.exists(switch_path):
                share = 0.8
            began = time.time()
            worked, waited = work_or_wait(share)  # the line
            truth.write(f"{began:.6f} {worked:.6f} {waited:.6f} {share}\n")
            truth.flush()


if __name__ == "__main__":
    main()
