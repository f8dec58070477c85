"""Target: a main thread that sleeps beside one other thread whose work the test switches: it spins in pure Python
while DIR/spin exists, else sleeps in 0.2 s naps. Writes the other thread's TID to DIR/side_tid once it runs.

Usage: side_thread_states.py DIR. The test can also freeze that thread alone (a cgroup v1 freezer takes a TID) to
hold it in D without CPU.
"""

from __future__ import annotations

import os
import sys
import threading
import time


def side_thread_work(folder: str) -> None:
    spin = os.path.join(folder, "spin")
    with open(os.path.join(folder, "side_tid.tmp"), "w") as handle:
        handle.write(str(threading.get_native_id()))
    os.replace(os.path.join(folder, "side_tid.tmp"), os.path.join(folder, "side_tid"))
    while True:
        if os.path.exists(spin):
            total = 0
            for i in range(200_000):
                total += i * i
        else:
            time.sleep(0.2)  # naps long enough that a loaded machine seldom catches it queued (R) for a core


def main() -> None:
    threading.Thread(target=side_thread_work, args=(sys.argv[1],), name="side", daemon=True).start()
    while True:
        time.sleep(1.0)


if __name__ == "__main__":
    main()
