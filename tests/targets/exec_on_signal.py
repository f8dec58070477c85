"""Target: a Python loop that, on SIGUSR1, execs the program given as its arguments (same PID, new program).

``exec_on_signal.py /bin/sleep 600`` becomes `sleep`; ``exec_on_signal.py PYTHON SCRIPT`` another Python
program. Prints "ready" once the handler is set.
"""

import os
import signal
import sys


def _exec_the_next_program(*_) -> None:
    os.execv(sys.argv[1], sys.argv[1:])


def loop_before_exec_for_gputop() -> None:
    while True:
        sum(range(10_000))


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, _exec_the_next_program)
    print("ready", flush=True)
    loop_before_exec_for_gputop()
