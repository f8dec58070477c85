"""Target: a training loop whose samples are streamed over HTTP from a slow server: reads block on the
network while the CPU idles.

Usage: diag_http_stream.py URL. Prints "ready" after the first shard has arrived.
"""

from __future__ import annotations

import argparse
import urllib.request


def fetch_shard(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read()


def train_on(shard: bytes) -> int:
    return sum(shard[::64])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    args = parser.parse_args()
    step = 0
    while True:
        train_on(fetch_shard(args.url))
        if step == 0:
            print("ready", flush=True)
        step += 1


if __name__ == "__main__":
    main()
