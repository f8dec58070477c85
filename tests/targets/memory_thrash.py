"""Target: a training loop whose dataset, memory-mapped, is larger than its memory cgroup's limit, so that each pass
reads back from disk what the limit made the kernel reclaim (the page cache thrashes): its tasks stall on memory
(PSI) and its main thread takes major page faults.

Writes --file-mib of data to --path (then drops it from the page cache), maps it and reads one byte a page, pass
after pass, one pass a step. Prints "ready" once mapped, then "step <n> <unix time> <seconds> <major faults>" after
each pass (its own count from getrusage); runs until --seconds pass.
"""

import argparse
import mmap
import os
import resource
import time

PAGE = mmap.PAGESIZE


def read_every_page(mapped: mmap.mmap, size: int) -> int:
    total = 0
    for offset in range(0, size, PAGE):
        total += mapped[offset]
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--path", required=True)
    parser.add_argument("--file-mib", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args()
    size = args.file_mib << 20
    chunk = bytes(range(256)) * 4096
    with open(args.path, "wb") as f:
        for _ in range(size // len(chunk)):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    fd = os.open(args.path, os.O_RDONLY)
    mapped = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    print("ready", flush=True)
    until = time.monotonic() + args.seconds
    step = 0
    while time.monotonic() < until:
        started = time.monotonic()
        read_every_page(mapped, size)
        step += 1
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
        print(f"step {step} {time.time():.3f} {time.monotonic() - started:.3f} {faults}", flush=True)


if __name__ == "__main__":
    main()
