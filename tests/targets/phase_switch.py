"""Target: prepares data on the main thread (a tokenize-like pure-Python loop) until SIGUSR1, then trains.

Usage: phase_switch.py [--seconds S] [--torch-threads N] [--start-in data|compute]. Prints "ready" once the first
phase (data preparation unless --start-in compute) runs, and on SIGUSR1
"switched UNIX_TIME compute" (the moment the loop left data preparation) before the first compute step; a
further SIGUSR1 switches back ("switched UNIX_TIME data"), and so on. The compute
phase is a CPU MLP training loop on torch's intra-op threads (as many as CPUs, torch's own default), built and
warmed up before the data phase so that its threads already exist: the switch is a change of what the same
threads do, not new threads appearing. ``--torch-threads 1`` keeps the compute on the main thread: it runs at
100% CPU in both phases and only its stack changes (issue 19: no CPU, I/O or wake-up signal moves).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time

import torch

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "gradient", "descent"]
switch_requested = False


def tokenize_text(text: str, vocab: dict[str, int]) -> list[int]:
    ids = []
    for word in text.split():
        for start in range(0, len(word), 2):  # toy subword split, slow on purpose like a Python BPE
            piece = word[start:start + 2]
            ids.append(vocab.setdefault(piece, len(vocab)) % 1000)
    return ids


def prepare_dataset(documents: list[str], vocab: dict[str, int], deadline: float, first: bool) -> int:
    """Tokenize documents over and over until asked to switch; the number of documents done."""
    done = 0
    while not switch_requested and time.monotonic() < deadline:
        tokenize_text(documents[done % len(documents)], vocab)
        done += 1
        if done == 1 and first:
            print("ready", flush=True)
    return done


def train_step(model, optimizer, batch: torch.Tensor) -> float:
    loss = model(batch).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def main() -> None:
    global switch_requested
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--torch-threads", type=int, default=max(2, os.cpu_count() or 2),
                        help="torch's intra-op threads (default: as many as CPUs, at least 2)")
    parser.add_argument("--start-in", choices=("data", "compute"), default="data",
                        help="the phase before the first SIGUSR1 (compute: training seen before the data phase)")
    args = parser.parse_args()

    def request_switch(*_) -> None:
        global switch_requested
        switch_requested = True

    signal.signal(signal.SIGUSR1, request_switch)
    torch.set_num_threads(args.torch_threads)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randn(256, 512)
    train_step(model, optimizer, batch)  # warm-up: torch's threads exist before the data phase

    rng = random.Random(0)
    documents = [" ".join(rng.choice(WORDS) for _ in range(2000)) for _ in range(32)]
    end = time.monotonic() + args.seconds
    vocab: dict[str, int] = {}
    first = 0 if args.start_in == "data" else 1  # the phase number of the first phase: even data, odd compute
    switches = first
    while time.monotonic() < end:
        if switches % 2 == 0:
            prepare_dataset(documents, vocab, end, first=switches == 0)
        else:
            if switches == first:
                print("ready", flush=True)
            while not switch_requested and time.monotonic() < end:
                train_step(model, optimizer, batch)
        if not switch_requested:
            break
        switch_requested = False
        switches += 1
        print(f"switched {time.time():.3f} {'compute' if switches % 2 else 'data'}", flush=True)
    if switches == first:
        sys.exit(3)


if __name__ == "__main__":
    main()
