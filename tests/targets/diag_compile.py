"""Target: torch.compile recompiling again and again because the sequence length keeps changing.

Usage: diag_compile.py [--backend B] [--steps-per-shape N]. With dynamic=False every new length is a new
graph; the recompile limit is raised so the storm goes on (past the limit torch would silently fall back
to eager). Each shape trains for N steps, so compiles and training steps interleave, as in a real run
with unpadded variable-length batches. Prints "ready" after the first step (the first compile).
"""

from __future__ import annotations

import argparse

import torch


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
        loss = compiled(torch.randn(32, seq_len, 128)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 0:
            print("ready", flush=True)
        step += 1


if __name__ == "__main__":
    main()
