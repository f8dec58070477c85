"""The bundled training process `gputop demo` watches: a small PyTorch loop that walks through real
bottlenecks, one phase after another, so a newcomer sees gputop's verdict change.

Phases (repeated until stopped):
  data        2 DataLoader workers whose ``__getitem__`` burns CPU; the model step is tiny, so the main
              process waits for batches in ``_next_data``.
  compute     batches are cheap; a wider model's forward/backward dominates (on the GPU when there is one).
  checkpoint  the model and optimizer state are saved with ``torch.save``, again and again, to a file that
              takes writes at a busy shared filesystem's pace (10 MB/s), so the demo does not hammer the disk.
  hang        a worker blocks forever inside ``__getitem__``: the loop stops making progress (tests use it).

Progress lines follow nanoGPT's format (``iter N: loss L, time Tms, mfu M%``) so the log probe reads them.
Run as a script: it needs nothing from gputop, only torch. With ``--parent-pid`` the kernel ends it when
that process is gone, so a killed or disconnected gputop leaves no orphan training behind (Linux).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import os
import signal
import sys
import tempfile
import threading
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

PHASES = ("data", "compute", "checkpoint", "hang")
PR_SET_PDEATHSIG = 1  # linux/prctl.h
CHECKPOINT_BYTES_PER_S = 10e6  # a busy shared filesystem; also keeps the demo gentle on the disk
SAMPLE_FEATURES = 256
TIME_AVERAGE_S = 10.0  # the printed time per iteration is a mean over this much of the phase


class SlowTokenDataset(Dataset):
    """Each item costs real CPU work in Python, the way heavy decoding or augmentation does."""

    def __init__(self, work_per_item: int) -> None:
        self.work_per_item = work_per_item

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> torch.Tensor:
        checksum = 0
        for i in range(self.work_per_item):
            checksum = (checksum * 31 + i + index) % 1_000_003
        generator = torch.Generator().manual_seed(checksum)
        return torch.randn(SAMPLE_FEATURES, generator=generator)


class StuckDataset(Dataset):
    """A worker that never returns an item, as when a read blocks on a dead network mount."""

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> torch.Tensor:
        threading.Event().wait()
        raise AssertionError("unreachable")


def make_model(hidden: int, device: torch.device) -> nn.Module:
    return nn.Sequential(
        nn.Linear(SAMPLE_FEATURES, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
        nn.Linear(hidden, SAMPLE_FEATURES),
    ).to(device)


class Trainer:
    """Owns the iteration counter and the nanoGPT-style log line, shared by every phase.

    The time printed is wall time per iteration, waiting for the batch included, as nanoGPT's dt is (it printed
    the model step alone, a twentieth of it in the data phase, and the pace shown was 20x too fast); averaged
    over the last TIME_AVERAGE_S of the phase, as Megatron averages over its log interval, since with two
    workers batches come in pairs and single iterations alternate between 1 ms and 50 ms."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.iteration = 0
        self._step_ends: collections.deque[float] = collections.deque()

    def begin_phase(self) -> None:
        """A new phase's iterations are timed on their own."""
        self._step_ends.clear()

    def step(self, model: nn.Module, optimizer: torch.optim.Optimizer, batch: torch.Tensor) -> None:
        started = time.perf_counter()
        batch = batch.to(self.device, non_blocking=True)
        loss = (model(batch) - batch).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_value = loss.item()  # waits for the GPU, as a real training loop's logging does
        ended = time.perf_counter()
        if not self._step_ends:
            self._step_ends.append(started)  # the phase's first iteration: its own step only
        self._step_ends.append(ended)
        while len(self._step_ends) > 2 and ended - self._step_ends[1] >= TIME_AVERAGE_S:
            self._step_ends.popleft()
        elapsed_ms = (ended - self._step_ends[0]) / (len(self._step_ends) - 1) * 1000
        print(f"iter {self.iteration}: loss {loss_value:.4f}, time {elapsed_ms:.2f}ms, mfu -100.00%", flush=True)
        self.iteration += 1


def run_loader_phase(trainer: Trainer, dataset: Dataset, hidden: int, workers: int, batch_size: int,
                     seconds: float) -> None:
    model = make_model(hidden, trainer.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers, shuffle=True)
    deadline = time.monotonic() + seconds
    for batch in loader:
        trainer.step(model, optimizer, batch)
        if time.monotonic() >= deadline:
            break
    del loader  # shuts its workers down before the next phase starts its own


class SharedFilesystemFile:
    """A file that accepts writes at most `bytes_per_s`, the way a busy network filesystem does."""

    def __init__(self, path: str, bytes_per_s: float) -> None:
        self._file = open(path, "wb")
        self._bytes_per_s = bytes_per_s
        self._written = 0
        self._started = time.monotonic()

    def write(self, data: bytes) -> int:
        written = self._file.write(data)
        self._written += written
        ahead_s = self._written / self._bytes_per_s - (time.monotonic() - self._started)
        if ahead_s > 0:
            time.sleep(ahead_s)
        return written

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()


def run_checkpoint_phase(trainer: Trainer, hidden: int, directory: str, seconds: float) -> None:
    model = make_model(hidden, trainer.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    trainer.step(model, optimizer, torch.randn(8, SAMPLE_FEATURES))  # so the optimizer has state to save
    path = os.path.join(directory, "checkpoint.pt")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        print(f"saving checkpoint to {path}", flush=True)
        checkpoint_file = SharedFilesystemFile(path, bytes_per_s=CHECKPOINT_BYTES_PER_S)
        try:
            # torch.save writes to any object with write() and flush(), but is annotated for real files only.
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
                       checkpoint_file)  # type: ignore[arg-type]
        finally:
            checkpoint_file.close()


def exit_with_parent(parent_pid: int) -> None:
    """Have the kernel SIGTERM this process when its parent (the watching gputop) dies, however it dies.

    A kernel flag rather than a watchdog thread, so no extra thread shows up in the stacks gputop shows.
    DataLoader workers notice their parent is gone and exit on their own.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:  # it died before the flag was set
        sys.exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", default="data,compute,checkpoint",
                        help=f"comma-separated, run in order and repeated; from {', '.join(PHASES)}")
    parser.add_argument("--phase-seconds", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--checkpoint-dir", default=None, help="default: a temporary folder, removed at exit")
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when this process is gone")
    parser.add_argument("--once", action="store_true", help="run the phases once instead of repeating")
    args = parser.parse_args()
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = [p for p in phases if p not in PHASES]
    if unknown or not phases:
        parser.error(f"unknown phase {', '.join(unknown) or '(none given)'}; choose from {', '.join(PHASES)}")
    # SIGTERM (from gputop, or from the kernel when gputop dies) unwinds normally, so the temporary
    # checkpoint folder is removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.parent_pid is not None:
        exit_with_parent(args.parent_pid)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)  # leave the other cores to the DataLoader workers and to gputop
    compute_hidden = 4096 if device.type == "cuda" else 1024
    trainer = Trainer(device)
    print(f"demo training on {device}: phases {', '.join(phases)}, {args.phase_seconds:g} s each", flush=True)
    with contextlib.ExitStack() as cleanup:
        checkpoint_dir = args.checkpoint_dir
        if checkpoint_dir is None and "checkpoint" in phases:
            checkpoint_dir = cleanup.enter_context(tempfile.TemporaryDirectory(prefix="gputop-demo-ckpt-"))
        while True:
            for phase in phases:
                print(f"phase {phase}", flush=True)
                trainer.begin_phase()
                if phase == "data":
                    run_loader_phase(trainer, SlowTokenDataset(work_per_item=40_000), hidden=64,
                                     workers=args.workers, batch_size=8, seconds=args.phase_seconds)
                elif phase == "compute":
                    run_loader_phase(trainer, SlowTokenDataset(work_per_item=10), hidden=compute_hidden,
                                     workers=args.workers, batch_size=256, seconds=args.phase_seconds)
                elif phase == "checkpoint":
                    run_checkpoint_phase(trainer, compute_hidden, checkpoint_dir, seconds=args.phase_seconds)
                else:
                    run_loader_phase(trainer, StuckDataset(), hidden=64, workers=args.workers, batch_size=8,
                                     seconds=float("inf"))
            if args.once:
                return

if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
