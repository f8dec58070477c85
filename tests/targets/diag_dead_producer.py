"""Target: the main loop reads batches from a multiprocessing.Queue whose producer process has died.

Usage: diag_dead_producer.py. The producer puts a few items and then crashes (os._exit); the main
loop consumes them and then blocks in Queue.get() forever. Prints "ready" once the producer is dead.
The dead producer stays a zombie, as it does in real jobs, because nothing reaps it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time


def produce_batches(queue) -> None:
    for index in range(3):
        queue.put([index] * 16)
    time.sleep(0.2)  # let the queue's feeder thread flush before the crash
    os._exit(1)


def main() -> None:
    queue = mp.get_context("fork").Queue()
    producer = mp.get_context("fork").Process(target=produce_batches, args=(queue,), name="producer")
    producer.start()
    for _ in range(3):
        queue.get()
    while os.waitid(os.P_PID, producer.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
        time.sleep(0.05)  # WNOWAIT: see that it died without reaping it
    print("ready", flush=True)
    while True:
        batch = queue.get()
        sum(batch)


if __name__ == "__main__":
    main()
