"""Target: a classic lock-order deadlock. The main thread and a helper thread each hold one lock and wait
for the other's, forever, using no CPU.

Usage: diag_deadlock.py. Prints "ready" once both threads hold their first lock (just before they block).
"""

from __future__ import annotations

import threading

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


def main() -> None:
    helper = threading.Thread(target=flush_metrics, name="metrics-flusher", daemon=True)
    helper.start()
    rotate_logs()


if __name__ == "__main__":
    main()
