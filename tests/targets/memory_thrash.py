"""Target: a training loop whose dataset, memory-mapped, is larger than its memory cgroup's limit, so that each pass
reads back from disk what the limit made the kernel reclaim (the page cache thrashes): its tasks stall on memory
(PSI) and its main thread takes major page faults.

Writes --file-mib of data to --path (then drops it from the page cache), maps it and reads one byte a page, pass
after pass, one pass a step. Prints "ready" once mapped, then "step <n> <unix time> <seconds> <major faults>" after
each pass (its own count from getrusage); runs until --seconds pass.

With --anonymous the data is the process's own memory instead (a dataset loaded whole): --file-mib of it, written
once, then read a byte a page each pass; under a limit below it, with swap on, the kernel swaps it out and each pass
swaps it back in.
"""

import argparse
import mmap
import os
import resource
import time

PAGE = mmap.PAGESIZE


def read_every_page(mapped, size: int) -> int:
    total = 0
    for offset in range(0, size, PAGE):
        total += mapped[offset]
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--path", help="the data file (not with --anonymous)")
    parser.add_argument("--file-mib", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--anonymous", action="store_true", help="the data in the process's own memory, not a file")
    args = parser.parse_args()
    size = args.file_mib << 20
    if args.anonymous == bool(args.path):
        parser.error("give --path or --anonymous")
    if args.anonymous:
        data = bytearray(size)
        for offset in range(0, size, PAGE):
            data[offset] = offset // PAGE % 251 + 1  # written: a page only read stays the shared zero page
        run(memoryview(data), size, args.seconds)
        return
    chunk = bytes(range(256)) * 4096
    with open(args.path, "wb") as f:
        for _ in range(size // len(chunk)):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    fd = os.open(args.path, os.O_RDONLY)
    mapped = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    run(mapped, size, args.seconds)


def run(data, size: int, seconds: float) -> None:
    """Pass after pass over every page of `data`, one pass a step, until `seconds` have passed."""
    print("ready", flush=True)
    until = time.monotonic() + seconds
    step = 0
    while time.monotonic() < until:
        started = time.monotonic()
        read_every_page(data, size)
        step += 1
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_majflt
        print(f"step {step} {time.time():.3f} {time.monotonic() - started:.3f} {faults}", flush=True)


if __name__ == "__main__":
    main()
