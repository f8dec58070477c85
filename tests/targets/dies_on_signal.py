"""Target: a training loop with two DataLoader workers that dies, on the test's word, the ways jobs die.

SIGUSR1: its main thread reads address 0 (a real SIGSEGV, as a crash in a C extension). SIGUSR2: its loop raises at
its next batch (an uncaught Python exception: exit status 1, the traceback on stderr). SIGKILL from the test needs no
handler. Killing a worker (the test sends it SIGKILL) makes the DataLoader raise in the main process, as PyTorch
does: "DataLoader worker (pid X) is killed by signal: Killed."

With --file-system-sharing the workers pass their batches through shared memory by name
(torch.multiprocessing.set_sharing_strategy("file_system")) and not as file descriptors fetched from the worker: a
worker killed while the main process fetched one made it raise ConnectionResetError in some runs, and then no
DataLoader line was printed; with it, the main process always prints PyTorch's line for the killed worker.

Prints "ready WORKER_PID WORKER_PID" once both workers have delivered a batch.
"""

from __future__ import annotations

import argparse
import ctypes
import signal

import torch
from torch.utils.data import DataLoader, Dataset


class Numbers(Dataset):
    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((64,), float(index % 7))


def crash(*_) -> None:
    ctypes.string_at(0)  # reads address 0: the kernel sends SIGSEGV


asked_to_fail: list[bool] = []


def fail(*_) -> None:
    # Noted here and raised in the loop: raised in the handler, the exception lands wherever the main thread is (in
    # a finalizer, it is printed and dropped), and in one loaded CI run the job ran on for 120 s after SIGUSR2.
    asked_to_fail.append(True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--file-system-sharing", action="store_true",
                        help="workers pass batches through shared memory by name, not as file descriptors")
    if parser.parse_args().file_system_sharing:
        torch.multiprocessing.set_sharing_strategy("file_system")
    signal.signal(signal.SIGUSR1, crash)
    signal.signal(signal.SIGUSR2, fail)
    torch.set_num_threads(1)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(Numbers(), batch_size=32, num_workers=2, persistent_workers=True)
    told = False
    while True:
        for batch in loader:
            if asked_to_fail:
                raise RuntimeError("the test asked this job to fail")
            loss = model(batch).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if not told:
                workers = loader._iterator._workers
                print("ready", *(w.pid for w in workers), flush=True)
                told = True


if __name__ == "__main__":
    main()
