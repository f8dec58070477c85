"""Target: logs a few training steps to a file, then blocks forever using no CPU (a hang after its last log line).

Usage: still_log.py LOG. Appends "step N | loss L" lines to LOG (the generic format gputop reads), then prints
"ready" and waits on an event nobody sets.
"""

from __future__ import annotations

import argparse
import threading


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("log")
    args = parser.parse_args()
    with open(args.log, "a", encoding="utf-8") as log:
        for step in range(1, 6):
            log.write(f"step {step} | loss {3.0 - step * 0.1:.2f}\n")
    print("ready", flush=True)
    threading.Event().wait()  # the step that never comes back


if __name__ == "__main__":
    main()
