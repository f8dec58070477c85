"""Target: a one-thread torch training loop beside one background Python thread of a chosen kind.

Usage: gil_threads.py --helper {hog,releasing,logger} [--seconds S]. Prints "ready" after the first
step, then "step N" every 20 steps.

* ``hog``: a thread named ``metrics_aggregator`` spins in pure Python (``aggregate_metrics`` in this file):
  it holds the GIL whenever it runs, so each return of the training loop from a torch op waits for it.
* ``releasing``: a thread named ``tokenizer`` hashes big buffers (hashlib releases the GIL for buffers
  over 2 KiB): it keeps a core busy without holding the GIL.
* ``logger``: a thread named ``metrics_logger`` sleeps most of the time and writes a line now and then.
"""

from __future__ import annotations

import argparse
import hashlib
import threading
import time

import torch


def aggregate_metrics(stop: threading.Event) -> None:
    """Pure Python arithmetic, never a call that releases the GIL: a telemetry thread gone wrong."""
    window: list[float] = []
    while not stop.is_set():
        total = 0.0
        for i in range(20_000):
            total += (i % 7) * 0.5
        window.append(total)
        if len(window) > 100:
            window.clear()


def tokenize_buffers(stop: threading.Event) -> None:
    """hashlib on 4 MiB buffers: the hashing runs with the GIL released."""
    buffer = bytes(4 << 20)
    while not stop.is_set():
        hashlib.sha256(buffer).hexdigest()


def log_metrics(stop: threading.Event) -> None:
    """A healthy logger: wakes twice a second, formats a line, sleeps again."""
    count = 0
    while not stop.wait(0.5):
        count += 1
        _ = f"metrics line {count} at {time.time():.3f}"


HELPERS = {
    "hog": ("metrics_aggregator", aggregate_metrics),
    "releasing": ("tokenizer", tokenize_buffers),
    "logger": ("metrics_logger", log_metrics),
}


def train_step(model, optimizer, batch: torch.Tensor) -> float:
    # Many small ops: each return from one into Python needs the GIL again.
    loss = model(batch).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--helper", choices=sorted(HELPERS), required=True)
    parser.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    layers = []
    for _ in range(8):
        layers += [torch.nn.Linear(128, 128), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randn(64, 128)
    stop = threading.Event()
    name, function = HELPERS[args.helper]
    helper = threading.Thread(target=function, args=(stop,), name=name, daemon=True)
    helper.start()
    end = time.monotonic() + args.seconds
    step = 0
    while time.monotonic() < end:
        train_step(model, optimizer, batch)
        if step == 0:
            print("ready", flush=True)
        step += 1
        if step % 20 == 0:
            print(f"step {step}", flush=True)
    stop.set()


if __name__ == "__main__":
    main()
