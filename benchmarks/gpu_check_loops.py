"""The GPU check's two small training loops (benchmarks/gpu_check.py), each built to be one bottleneck:

- ``launch_bound``: a deep stack of tiny layers (width 64, 24 blocks of Linear, LayerNorm, GELU) at batch 1, eager,
  with AdamW: some 300 kernels a step, each a few microseconds of GPU work, so the step lasts as long as Python
  and the CUDA driver take to launch them. The main thread runs all the time; it never waits on the GPU, which
  is "busy" in nvidia-smi's sense while few of its SMs do anything. One host sync per log line, 4 a second.
- ``data_starved``: a small MLP fed by a DataLoader whose 2 workers "decode" each sample in pure Python (several
  passes over 3,072 values, about as long as a JPEG decode and augmentation written in Python): the main thread
  waits for the next batch and the GPU idles. On a GPU it is also a one-rank NCCL job (a process group of world size
  1, the loss all-reduced each step): NCCL 2.24 and later answer on their RAS port (localhost:28028) in any NCCL
  job, so gputop's snapshot of this case holds what RAS said (issue 40: the one real check of that reading).

Both print ``step N | loss L | step_time Xms`` lines (gputop's generic log format) to stdout, and run until
``--seconds`` have passed. The launch-bound loop with a lever pulled (the check's measurement of it): ``--graphs``
captures its whole step (forward, backward, AdamW with capturable=True) in one CUDA graph and replays it, the most
CUDA graphs can win on it; ``--batch N`` gives each kernel N samples.

    python benchmarks/gpu_check_loops.py --mode launch_bound|data_starved [--device cuda|cpu] [--seconds S]
                                         [--graphs] [--batch N]
"""

from __future__ import annotations

import argparse
import os
import socket
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

LAUNCH_WIDTH = 64
LAUNCH_BLOCKS = 24
LAUNCH_LOG_EVERY_S = 0.25  # seconds between log lines, each one host sync (it reads the loss): a few per second
SAMPLE_VALUES = 3 * 32 * 32  # one small RGB image's worth of values
DECODE_PASSES = 6
DATA_BATCH = 64
DATA_WORKERS = 2


def tiny_deep_model() -> torch.nn.Module:
    blocks = [torch.nn.Sequential(torch.nn.Linear(LAUNCH_WIDTH, LAUNCH_WIDTH), torch.nn.LayerNorm(LAUNCH_WIDTH),
                                  torch.nn.GELU()) for _ in range(LAUNCH_BLOCKS)]
    return torch.nn.Sequential(*blocks)


def launch_bound(device: str, end: float, graphs: bool = False, batch: int = 1) -> None:
    model = tiny_deep_model().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=graphs)
    x = torch.randn(batch, LAUNCH_WIDTH, device=device)

    def step_once() -> torch.Tensor:
        loss = model(x).square().mean()
        optimizer.zero_grad(set_to_none=False)  # graphs: the gradients stay in the captured memory
        loss.backward()
        optimizer.step()
        return loss

    run = step_once
    if graphs:  # PyTorch's whole-network capture: warm up on a side stream, capture one step, replay it
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step_once()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured_loss = step_once()

        def run() -> torch.Tensor:
            graph.replay()
            return captured_loss

    step, logged_step, since = 0, 0, time.perf_counter()
    while time.monotonic() < end:
        loss = run()
        step += 1
        if (now := time.perf_counter()) - since >= LAUNCH_LOG_EVERY_S:
            value = loss.item()  # the sync first, so the line's time covers the steps' GPU work too
            now = time.perf_counter()
            print(f"step {step} | loss {value:.4f} | step_time {(now - since) / (step - logged_step) * 1e3:.3f}ms",
                  flush=True)
            logged_step, since = step, now


class PythonDecodedImages(Dataset):
    """Each sample costs a few milliseconds of pure-Python work in a DataLoader worker."""

    def __len__(self) -> int:
        return 10_000_000

    def __getitem__(self, index: int) -> torch.Tensor:
        state = index * 2_654_435_761 % 2**32
        values = []
        for _ in range(SAMPLE_VALUES):  # "entropy decoding": one value at a time, as a Python decoder does
            state = (state * 1_103_515_245 + 12_345) % 2**31
            values.append((state >> 16) & 255)
        for _ in range(DECODE_PASSES):  # "augmentation": brightness, contrast, clipping, one value at a time
            values = [min(255.0, max(0.0, v * 1.02 - 1.5)) for v in values]
        return torch.tensor(values, dtype=torch.float32) / 255.0


def one_rank_nccl_group() -> None:
    """A process group of one rank on NCCL (its RAS thread starts with the communicator, at the first collective)."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1)


def data_starved(device: str, end: float) -> None:
    nccl = device.startswith("cuda")
    if nccl:
        one_rank_nccl_group()
    model = torch.nn.Sequential(torch.nn.Linear(SAMPLE_VALUES, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(PythonDecodedImages(), batch_size=DATA_BATCH, num_workers=DATA_WORKERS,
                        pin_memory=device.startswith("cuda"), persistent_workers=True)
    since = time.perf_counter()
    for step, batch in enumerate(loader, start=1):
        loss = model(batch.to(device, non_blocking=True)).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if nccl:
            dist.all_reduce(loss.detach())  # one rank: NCCL copies it, and its communicator (and RAS) are up
        now = time.perf_counter()
        print(f"step {step} | loss {loss.item():.4f} | step_time {(now - since) * 1e3:.1f}ms", flush=True)
        since = now
        if time.monotonic() > end:
            break


MODES = ("launch_bound", "data_starved")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--seconds", type=float, default=120.0, help="stop after this long (the check ends it sooner)")
    parser.add_argument("--graphs", action="store_true", help="launch_bound: its whole step in one CUDA graph")
    parser.add_argument("--batch", type=int, default=1, help="launch_bound: samples a step (default 1)")
    args = parser.parse_args()
    end = time.monotonic() + args.seconds
    if args.mode == "launch_bound":
        launch_bound(args.device, end, graphs=args.graphs, batch=args.batch)
    else:
        data_starved(args.device, end)


if __name__ == "__main__":
    main()
