"""Target: the main loop reads batches from a multiprocessing.Queue fed by a producer process that dies.

Usage: diag_dead_producer.py [--die-after S]. The producer puts a batch every 0.1 s and crashes
(os._exit) after S seconds (default 0: at once, after three batches); the main loop consumes what
arrived and then blocks in Queue.get() forever. Prints "ready" once the first batch has arrived.
Nothing reaps the dead producer, as in real jobs that never join their children.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time


def produce_batches(queue, die_after: float) -> None:
    deadline = time.monotonic() + die_after
    index = 0
    while index < 3 or time.monotonic() < deadline:
        queue.put([index] * 16)
        index += 1
        time.sleep(0.1)
    time.sleep(0.2)  # let the queue's feeder thread flush before the crash
    os._exit(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--die-after", type=float, default=0.0)
    args = parser.parse_args()
    context = mp.get_context("fork")
    queue = context.Queue()
    producer = context.Process(target=produce_batches, args=(queue, args.die_after), name="producer")
    producer.start()
    batch = queue.get()
    print("ready", flush=True)
    while True:
        sum(batch)
        batch = queue.get()


if __name__ == "__main__":
    main()
