"""Target: a model compiled with torch.compile (Inductor, the default backend) training on the CPU: its main thread
runs Inductor's generated code (Runner.call in /tmp/torchinductor_<user>/…/c….py), as nanochat's base_train and
litgpt's pretrain do on a CPU.

Usage: diag_compiled_cpu.py [--seconds S]. Prints "ready" after the first step (the compiles of the forward and
the backward graph are done by then).
"""

from __future__ import annotations

import argparse
import time

import torch

WIDTH = 512
LAYERS = 4


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + torch.nn.functional.gelu(layer(x)) * x.sigmoid()  # elementwise work for Inductor to fuse
        return x


def train_step(model, optimizer, batch: torch.Tensor) -> None:
    loss = model(batch).square().mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=300.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = Mlp()
    compiled = torch.compile(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)  # cheap: the model's own steps stay the hot frames
    batch = torch.randn(512, WIDTH)
    end = time.monotonic() + args.seconds
    step = 0
    while time.monotonic() < end:
        train_step(compiled, optimizer, batch)
        if step == 0:
            print("ready", flush=True)
        step += 1


if __name__ == "__main__":
    main()
