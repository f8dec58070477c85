"""Target: torch.compile recompiling again and again because the sequence length keeps changing.

Usage: diag_compile.py [--backend B] [--steps-per-shape N]. With dynamic=False every new length is a new
graph; the recompile limit is raised so the storm goes on (past the limit torch would silently fall back
to eager). Each shape trains for N steps, so compiles and training steps interleave, as in a real run
with unpadded variable-length batches. Prints "ready" after the first step (the first compile).

The batch shrinks as the length grows, so a step costs about the same at every shape: the compiles' share of
the time stays where it starts however long the run goes on. With a fixed batch it did not: on a crowded
machine the test waited long enough for the length to reach ~600, where 15 steps took 7.5 s against a 0.8 s
compile, and the storm's share fell to 10%, under what the rule needs (seen once in a full CI-style run).
"""

from __future__ import annotations

import argparse

import torch

# Tokens in each batch, whatever its length: 32 sequences of the first length, 17.
TOKENS_PER_BATCH = 32 * 17


class TinyBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(128, 512)
        self.down = torch.nn.Linear(512, 128)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x))).softmax(dim=1).sum(dim=1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--steps-per-shape", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch._dynamo.config.cache_size_limit = 100_000
    if hasattr(torch._dynamo.config, "recompile_limit"):
        torch._dynamo.config.recompile_limit = 100_000
    model = TinyBlock()
    compiled = torch.compile(model, backend=args.backend, dynamic=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    seq_len = 16
    step = 0
    while True:
        if step % args.steps_per_shape == 0:
            seq_len += 1  # a new shape: variable-length batches, not padded to buckets
        batch = max(1, TOKENS_PER_BATCH // seq_len)
        loss = compiled(torch.randn(batch, seq_len, 128)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 0:
            print("ready", flush=True)
        step += 1


if __name__ == "__main__":
    main()
