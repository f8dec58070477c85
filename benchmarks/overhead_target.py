"""Benchmark target: a CPU training loop (small MLP, one torch thread) beside ~100 idle threads.

Every 0.2 s it writes "steps monotonic_time" to the file named by argv[1], so the benchmark can read its
throughput over any interval without attaching anything to it.
"""

import os
import sys
import threading
import time

import torch

IDLE_THREADS = 100


def main() -> None:
    progress_path = sys.argv[1]
    torch.set_num_threads(1)
    stop = threading.Event()
    for _ in range(IDLE_THREADS):
        threading.Thread(target=stop.wait, daemon=True).start()
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    steps, last_write = 0, 0.0
    while True:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        steps += 1
        now = time.monotonic()
        if now - last_write >= 0.2:
            tmp = progress_path + ".tmp"
            with open(tmp, "w") as fh:
                fh.write(f"{steps} {now}\n")
            os.replace(tmp, progress_path)
            last_write = now


if __name__ == "__main__":
    main()
