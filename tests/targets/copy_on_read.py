"""Target: a DataLoader-like worker that copies its parent's pages by only reading them.

The parent builds a dataset held as a list of Python objects (--objects strings), then forks one worker, which
walks the list at --per-second objects a second, only reading each item. Reading a Python object writes its
reference count, so each page of the parent's objects the worker reaches becomes its own copy (copy-on-read): its
private bytes grow and its shared bytes shrink. Prints "worker <pid>" once the worker runs; both run until
--seconds pass.
"""

import argparse
import os
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=3_000_000)
    parser.add_argument("--per-second", type=int, default=60_000)
    parser.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args()
    dataset = [f"sample-{i:012d}-of-the-dataset" for i in range(args.objects)]
    pid = os.fork()
    if pid:
        print(f"worker {pid}", flush=True)
        time.sleep(args.seconds)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        return
    start, done, total = time.time(), 0, 0
    while time.time() - start < args.seconds and done < len(dataset):
        due = int((time.time() - start) * args.per_second)
        for item in dataset[done:due]:  # a read: only the reference count is written
            total += len(item)
        done = max(done, due)
        time.sleep(0.05)
    time.sleep(max(0.0, args.seconds - (time.time() - start)))
    sys.exit(0)


if __name__ == "__main__":
    main()
