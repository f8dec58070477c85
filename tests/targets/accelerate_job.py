"""Target: an accelerate ``Accelerator`` job under torchrun, two CPU ranks on gloo, a tiny model; from its fourth
step rank 1 blocks forever (wait_for_shared_lock) before backward, so rank 0 waits in the gradient all-reduce.

``accelerate_job.py --launch`` execs ``python -m torch.distributed.run --nproc_per_node 2 ... accelerate_job.py``,
so the PID the test holds is torchrun's agent. Rank 0 prints "ready" once both ranks have finished two steps.
"""

from __future__ import annotations

import os
import socket
import sys
import threading

HANG_AT_STEP = 3


def wait_for_shared_lock() -> None:
    """A lock nobody releases: the rank blocks here for ever."""
    threading.Event().wait()


def launch() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.execv(sys.executable, [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                              "--master_addr", "127.0.0.1", "--master_port", str(port), __file__])


def train() -> None:
    import torch
    from accelerate import Accelerator
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = DataLoader(TensorDataset(torch.randn(100_000, 32), torch.randn(100_000, 1)), batch_size=8)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    step = 0
    while True:
        for inputs, targets in data:
            if accelerator.process_index == 1 and step >= HANG_AT_STEP:
                wait_for_shared_lock()
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
            if step == 1 and accelerator.is_main_process:
                print("ready", flush=True)
            step += 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--launch"]:
        launch()
    train()
