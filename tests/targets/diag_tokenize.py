"""Target: data preparation on the main thread: every step tokenizes raw text in pure Python first.

Usage: diag_tokenize.py [--seconds S]. Prints "ready" after the first step.
The tokenizer (``tokenize_text``) is called from ``get_batch`` and dominates the step.
"""

from __future__ import annotations

import argparse
import random
import time

import torch

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "gradient", "descent"]


def tokenize_text(text: str, vocab: dict[str, int]) -> list[int]:
    ids = []
    for word in text.split():
        for start in range(0, len(word), 2):  # toy subword split, slow on purpose like a Python BPE
            piece = word[start:start + 2]
            ids.append(vocab.setdefault(piece, len(vocab)) % 1000)
    return ids


def get_batch(documents: list[str], rng: random.Random, vocab: dict[str, int]) -> torch.Tensor:
    rows = [tokenize_text(rng.choice(documents), vocab)[:256] for _ in range(8)]
    return torch.tensor(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = random.Random(0)
    documents = [" ".join(rng.choice(WORDS) for _ in range(20000)) for _ in range(32)]
    vocab: dict[str, int] = {}
    model = torch.nn.Sequential(torch.nn.Embedding(1000, 32), torch.nn.Linear(32, 1000))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    end = time.monotonic() + args.seconds
    step = 0
    while time.monotonic() < end:
        tokens = get_batch(documents, rng, vocab)
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 1000), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 0:
            print("ready", flush=True)
        step += 1


if __name__ == "__main__":
    main()
