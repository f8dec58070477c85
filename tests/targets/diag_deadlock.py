"""Target: a classic lock-order deadlock. The main thread and a helper thread each hold one lock and wait
for the other's, forever, using no CPU.

With --heartbeat a third thread keeps working beside the deadlock (it burns some CPU and appends a line to
a log file every 50 ms), as a metrics or watchdog thread does in real jobs: the process as a whole is
never quiet, only its main thread is.

Usage: diag_deadlock.py [--heartbeat LOGFILE]. Prints "ready" once both threads hold their first lock
(just before they block).
"""

from __future__ import annotations

import argparse
import threading
import time

rotation_lock = threading.Lock()
metrics_lock = threading.Lock()
both_hold_one = threading.Barrier(2)


def flush_metrics() -> None:
    with metrics_lock:
        both_hold_one.wait()
        with rotation_lock:
            pass


def rotate_logs() -> None:
    with rotation_lock:
        both_hold_one.wait()
        print("ready", flush=True)
        with metrics_lock:
            pass


def heartbeat(log_path: str) -> None:
    with open(log_path, "a", encoding="utf-8") as log:
        beat = 0
        while True:
            deadline = time.monotonic() + 0.01
            while time.monotonic() < deadline:  # ~20% of a core
                pass
            beat += 1
            log.write(f"heartbeat {beat}\n")
            log.flush()
            time.sleep(0.04)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--heartbeat", metavar="LOGFILE")
    args = parser.parse_args()
    if args.heartbeat:
        threading.Thread(target=heartbeat, args=(args.heartbeat,), name="heartbeat", daemon=True).start()
    helper = threading.Thread(target=flush_metrics, name="metrics-flusher", daemon=True)
    helper.start()
    rotate_logs()


if __name__ == "__main__":
    main()
