"""Target: a straggler under ``accelerate launch``. Two CPU ranks (``Accelerator(cpu=True)``: gloo, DDP), a tiny
model; each step every rank packs its documents into fixed-length sequences in pack_documents, and rank 1 packs
six times as many as rank 0, so rank 0 waits for it in DDP's gradient all-reduce inside backward. Each rank reads
its documents through one DataLoader worker.

``accelerate_straggler.py --launch`` execs ``accelerate launch --multi_gpu --num_processes 2 ... this file``, so
the PID the test holds is accelerate's launcher, as a person's would be. Rank 0 prints "ready" once both ranks
have finished two steps; the job runs until it is killed.
"""

from __future__ import annotations

import os
import socket
import sys

DOCUMENTS_RANK_0 = 120
SLOWER_BY = 6  # rank 1 packs this many times rank 0's documents
SEQUENCE = 64
ROWS = 64  # rows a step trains on, whatever each rank packed


def pack_documents(documents: list[list[int]]) -> list[list[int]]:
    """Greedy packing of token lists into SEQUENCE-long rows, in pure Python: the uneven work of this job."""
    rows: list[list[int]] = []
    row: list[int] = []
    for document in documents:
        for token in document:
            row.append((token * 31 + len(row)) % 50_000)
            if len(row) == SEQUENCE:
                rows.append(row)
                row = []
    return rows


def launch() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    accelerate = os.path.join(os.path.dirname(sys.executable), "accelerate")
    os.execv(accelerate, [accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                          "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(port),
                          __file__])


def train() -> None:
    import torch
    from accelerate import Accelerator
    from torch.utils.data import DataLoader, Dataset

    class Documents(Dataset):
        """Synthetic documents of a few hundred tokens each."""

        def __len__(self) -> int:
            return 1_000_000

        def __getitem__(self, index: int) -> list[int]:
            start = index * 7 % 50_000
            return list(range(start, start + 300 + index % 200))

    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True)
    count = DOCUMENTS_RANK_0 * (SLOWER_BY if accelerator.process_index == 1 else 1)
    model = torch.nn.Sequential(torch.nn.Embedding(50_000, 16), torch.nn.Flatten(),
                                torch.nn.Linear(16 * SEQUENCE, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    # Not through accelerator.prepare: each rank reads its own stream of documents, as many as it packs.
    documents = iter(DataLoader(Documents(), batch_size=count, num_workers=1, collate_fn=list))
    step = 0
    while True:
        rows = pack_documents(next(documents))
        inputs = torch.tensor(rows[:ROWS])
        loss = model(inputs).square().mean()
        optimizer.zero_grad()
        accelerator.backward(loss)  # DDP's gradient all-reduce: rank 0 waits here for rank 1
        optimizer.step()
        if step == 1 and accelerator.is_main_process:
            print("ready", flush=True)
        step += 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--launch"]:
        launch()
    train()
