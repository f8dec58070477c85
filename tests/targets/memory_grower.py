"""Target: grows its memory at a set rate, as a leaking training job does, and says what it measured itself.

Allocates --chunk-mib MiB bytearrays on a schedule of --rate-mib MiB a second (set by the clock, so a slow moment
is caught up, never drifts), writing a byte to every page so each is resident, and keeps them all. Prints "ready"
once started, then "rss <unix time> <bytes>" (its own RSS, from /proc/self/statm) every --every seconds. With
--go-on-stdin it waits for a line on stdin before it starts to grow. Runs until --seconds pass, or until the OOM
killer ends it.
"""

import argparse
import os
import sys
import time

PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1 << 20


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate-mib", type=float, default=8.0)
    parser.add_argument("--chunk-mib", type=float, default=1.0)
    parser.add_argument("--every", type=float, default=0.5)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--go-on-stdin", action="store_true")
    args = parser.parse_args()
    chunk = int(args.chunk_mib * MIB)
    interval = chunk / (args.rate_mib * MIB)  # seconds between chunks
    print("ready", flush=True)
    if args.go_on_stdin:
        sys.stdin.readline()

    kept = []
    start = time.time()
    allocated = 0
    next_print = start
    while time.time() - start < args.seconds:
        now = time.time()
        if now >= next_print:
            print(f"rss {now:.3f} {rss_bytes()}", flush=True)
            next_print += args.every
        due = start + allocated * interval
        if now >= due:
            buffer = bytearray(chunk)
            buffer[::PAGE] = b"\x01" * len(range(0, chunk, PAGE))  # every page written: resident, not just reserved
            kept.append(buffer)
            allocated += 1
            continue
        time.sleep(max(0.0, min(due, next_print) - time.time()))


if __name__ == "__main__":
    main()
