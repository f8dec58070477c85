"""Target: the first compile of a deep model, as nanoGPT's GPT-2 XL on an H200 went through (tests/fixtures/h200,
gpt2xl_s1): torch.compile with Inductor (the default backend) compiles the training graph on the first call, then
the backward graph, and only then does a training step run; after that it trains at one shape and never compiles
again. Nothing is trained before the compile.

The model is many thin layers (Inductor's compile time grows with them; their compute stays small): 96 of them
took tens of seconds to compile on a 2-core machine, far longer than a test needs to see the warm-up, and still so
on a machine several times faster. The on-disk caches are off, so every run compiles from scratch.

Usage: diag_compile_once.py [--layers N]. Prints "ready" just before the first call, so a watcher attaches while
it compiles; "compiled after S s" once the first step is done; "step N" every few steps after.
"""

from __future__ import annotations

import argparse
import os
import time

# Before torch reads its configuration: a cached graph (/tmp/torchinductor_<user>, kept between runs) would skip
# the compile this target exists for.
os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"

import torch

WIDTH = 64


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.up = torch.nn.Linear(WIDTH, 2 * WIDTH)
        self.down = torch.nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=96)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*(Block() for _ in range(args.layers)))
    compiled = torch.compile(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = torch.randn(8, 16, WIDTH)  # one shape for the whole run: nothing to compile again
    print("ready", flush=True)
    started = time.monotonic()
    step = 0
    while True:
        loss = compiled(batch).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 0:
            print(f"compiled after {time.monotonic() - started:.1f} s", flush=True)
        elif step % 50 == 0:
            print(f"step {step}", flush=True)
        step += 1


if __name__ == "__main__":
    main()
