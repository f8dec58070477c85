"""Target: a training loop that saves a checkpoint periodically, as nanoGPT does every eval_interval: most of
the time computes, and each save (a ~16 MB state dict through a file that takes writes at 8 MB/s, a busy shared
filesystem's pace, so a save lasts ~2 s on any machine) is a phase shorter than a stack window that comes back.

The saves come every --every-s seconds of wall time, not every N steps: a period counted in steps would be as
short as this machine is fast (6 s on a quiet one, shorter than the stack windows that must resolve it), and a
test must not depend on how fast its machine computes.

Usage: periodic_checkpoint.py DIR [--every-s S]. Prints "ready" after the first step, and for each save
"saved step S at T1 after T0" (Unix times the save began and ended) so a test knows the true period and share.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

WRITE_BYTES_PER_S = 8e6


class SlowFile:
    """A file that accepts writes at most WRITE_BYTES_PER_S."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "wb")

    def write(self, data) -> int:
        written = self._file.write(data)
        time.sleep(len(data) / WRITE_BYTES_PER_S)
        return written

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def save_checkpoint(state: dict, path: str) -> None:
    target = SlowFile(path)
    try:
        torch.save(state, target)
    finally:
        target.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("--every-s", type=float, default=12.0, help="seconds of training between checkpoints")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    path = os.path.join(args.directory, "ckpt.pt")
    step = 0
    last_save_ended = time.monotonic()
    while True:
        loss = model(torch.randn(256, 1024)).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step == 0:
            print("ready", flush=True)
        step += 1
        if time.monotonic() - last_save_ended >= args.every_s:
            began = time.time()
            save_checkpoint({"model": model.state_dict(), "step": step}, path)
            print(f"saved step {step} at {time.time():.3f} after {began:.3f}", flush=True)
            last_save_ended = time.monotonic()


if __name__ == "__main__":
    main()
