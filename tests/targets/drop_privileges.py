"""Target: starts as root, then becomes uid/gid 65534 (nobody), which also makes it non-dumpable.

A monitor without CAP_SYS_PTRACE may then neither trace it nor read its private /proc files: the
"PID you may not trace" case. Prints "ready" once it has dropped privileges. With `--sleep` it sleeps instead
of spinning: the case a monitor that cannot see would call "idle".
"""

import os
import sys
import time


def spin_as_nobody_for_gputop() -> None:
    while True:
        sum(range(10_000))


def sleep_as_nobody_for_gputop() -> None:
    while True:
        time.sleep(0.5)


if __name__ == "__main__":
    os.setgid(65534)
    os.setuid(65534)
    print("ready", flush=True)
    if "--sleep" in sys.argv:
        sleep_as_nobody_for_gputop()
    spin_as_nobody_for_gputop()
