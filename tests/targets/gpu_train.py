"""Target for the real-GPU recordings (tests/fixtures/frames/record_gpu_runs.py): a small training loop on a
CUDA GPU in one of three shapes a user meets.

Usage: gpu_train.py --mode gpu_bound|data_starved|compile [--seconds S]

- ``gpu_bound``: a stack of wide bf16 linear layers on batches made on the GPU: the GPU is busy all the time
  and the Python thread waits in CUDA's synchronisation (``loss.item()`` each step, as loops that log do).
- ``data_starved``: a small model fed by a DataLoader whose 4 workers decode and augment each sample in
  Python: the GPU idles while the main process waits for the next batch.
- ``compile``: torch.compile (inductor, so Triton kernels are really generated) with dynamic=False on batches
  whose sequence length keeps changing: a recompilation storm.

Prints "ready" after the first step, then runs until ``--seconds`` have passed.
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from torch.utils.data import DataLoader, Dataset


class WideMLP(torch.nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.nn.functional.gelu(layer(x))
        return x


class SlowDecodeDataset(Dataset):
    """Each sample costs a few milliseconds of pure-Python work in a worker, as JPEG decoding and
    augmentation written in Python do."""

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor(augment_in_python(index), dtype=torch.float32)


def augment_in_python(index: int) -> list[float]:
    values = [math.sin(index + i) for i in range(256)]
    for _ in range(40):
        values = [v * 0.5 + math.cos(v) * 0.5 for v in values]
    return values


def train_gpu_bound(end: float) -> None:
    model = WideMLP(8192, 8).cuda().to(torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step = 0
    while time.monotonic() < end:
        x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        loss = model(x).float().square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss.item()
        if step == 0:
            print("ready", flush=True)
        step += 1


def train_data_starved(end: float) -> None:
    model = WideMLP(256, 4).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowDecodeDataset(), batch_size=64, num_workers=4, pin_memory=True)
    for step, batch in enumerate(loader):
        loss = model(batch.cuda(non_blocking=True)).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss.item()
        if step == 0:
            print("ready", flush=True)
        if time.monotonic() > end:
            break


def train_compile_storm(end: float) -> None:
    torch._dynamo.config.cache_size_limit = 100_000
    if hasattr(torch._dynamo.config, "recompile_limit"):
        torch._dynamo.config.recompile_limit = 100_000
    model = WideMLP(1024, 4).cuda()
    compiled = torch.compile(model, dynamic=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    seq_len, step = 16, 0
    while time.monotonic() < end:
        if step % 10 == 0:
            seq_len += 1  # variable-length batches, not padded to buckets: each length is a new graph
        loss = compiled(torch.randn(64, seq_len, 1024, device="cuda")).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss.item()
        if step == 0:
            print("ready", flush=True)
        step += 1


MODES = {"gpu_bound": train_gpu_bound, "data_starved": train_data_starved, "compile": train_compile_storm}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=sorted(MODES), required=True)
    parser.add_argument("--seconds", type=float, default=120.0)
    args = parser.parse_args()
    MODES[args.mode](time.monotonic() + args.seconds)


if __name__ == "__main__":
    main()
