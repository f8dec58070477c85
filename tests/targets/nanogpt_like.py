"""A stand-in for nanoGPT's train.py: prints progress lines at a steady pace and does nothing else.

--style nanogpt prints train.py's exact format (``iter N: loss X, time Yms, mfu Z%``, mfu -100.00% for the
first five iterations as nanoGPT does); --style untimed prints ``step N | loss X`` with no time field, so
a reader has to time the lines itself. Run it with stdout redirected to a file to test log tailing. --no-flush prints
as nanoGPT's train.py does (plain print: block-buffered into a file without -u); --mfu sets the printed figure.
"""

from __future__ import annotations

import argparse
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--interval", type=float, default=0.3, help="seconds between iterations")
    parser.add_argument("--iters", type=int, default=10_000)
    parser.add_argument("--style", choices=("nanogpt", "untimed"), default="nanogpt")
    parser.add_argument("--no-flush", action="store_true", help="plain print, as nanoGPT (no flush=True)")
    parser.add_argument("--mfu", type=float, default=42.0, help="the mfu printed after the first five iterations")
    args = parser.parse_args()

    print("Initializing a new model from scratch", flush=True)
    print("ready", file=sys.stderr, flush=True)
    loss = 10.99
    last = time.time()
    for iteration in range(args.iters):
        time.sleep(args.interval)
        now = time.time()
        dt, last = now - last, now
        loss *= 0.99
        if args.style == "nanogpt":
            mfu = -100.0 if iteration < 5 else args.mfu  # nanoGPT prints -100% until its estimate starts
            print(f"iter {iteration}: loss {loss:.4f}, time {dt * 1000:.2f}ms, mfu {mfu:.2f}%", flush=not args.no_flush)
        else:
            print(f"step {iteration} | loss {loss:.4f}", flush=not args.no_flush)


if __name__ == "__main__":
    main()
