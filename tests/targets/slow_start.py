"""Target: a job that takes seconds to start, as one importing torch does on a crowded machine, then trains.

Usage: slow_start.py [--import-seconds S]. Prints "started" before its imports, then imports a module whose import
runs Python for S seconds (slow_import_module.py: the import itself is the work, under importlib's frames, as
torch's is), prints "imported UNIX_TIME" and trains a small MLP on the CPU until killed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--import-seconds", type=float, default=6.0)
    args = parser.parse_args()
    print("started", flush=True)
    os.environ["SLOW_IMPORT_SECONDS"] = str(args.import_seconds)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import slow_import_module  # noqa: F401  (its import is the slow start)
    import torch

    print(f"imported {time.time():.3f}", flush=True)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batch = torch.randn(128, 256)
    while True:
        loss = model(batch).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
