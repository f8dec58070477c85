"""Target: once READY_FILE.go exists, starts one child from its main thread and one from a helper thread (which
stays alive, so the child stays listed under that thread), then writes {"main": pid, "side": pid} to READY_FILE.

Usage: thread_children.py READY_FILE. Prints "ready" once it waits for the go file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def helper_thread_starts_a_child(started: dict, done: threading.Event) -> None:
    started["side"] = subprocess.Popen(SLEEPER).pid
    done.set()
    time.sleep(600)  # a thread that ended would hand its children to another thread of the process


def main() -> None:
    ready_file = sys.argv[1]
    print("ready", flush=True)
    while not os.path.exists(ready_file + ".go"):
        time.sleep(0.05)
    started: dict[str, int] = {}
    done = threading.Event()
    threading.Thread(target=helper_thread_starts_a_child, args=(started, done), daemon=True).start()
    started["main"] = subprocess.Popen(SLEEPER).pid
    done.wait()
    with open(ready_file + ".tmp", "w") as handle:
        json.dump(started, handle)
    os.replace(ready_file + ".tmp", ready_file)
    time.sleep(600)


if __name__ == "__main__":
    main()
