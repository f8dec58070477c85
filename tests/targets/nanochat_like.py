"""A stand-in for nanochat's scripts/base_train.py on CPU: trains a tiny torch model one optimizer step every
``--interval`` seconds of wall time (step k ends at start + k·interval; the rest of the step asleep inside its
timed region, as a GPU step's host waits on the device) and prints base_train.py's own lines
(tests/support/program_lines.py) with its arithmetic: dt, tok/sec, and the MFU against
``--gpu-peak-flops`` (nanochat's get_peak_flops gives infinity on CPU, so its MFU prints 0.00: a test passes a peak
a CPU reaches a share of, so the figure is not 0).

dt spans the whole step, from the end of the step before. base_train.py starts its clock at the step's start, so
the logging between two steps is outside its dt: milliseconds on a GPU node, but on a loaded 2-core CI machine the
target can be descheduled there, and what that costs is a real mismatch between dt and the step counter. The
tests on this target check that a dt which agrees claims nothing, so here it agrees by construction; a claimed
mismatch is tested on recorded logs (tests/unit/test_pace_hysteresis.py).

Each step's end is also written to ``--steps-file`` (``N <unix time>`` a line), so a test knows the true rate.
Prints "ready" on stderr once training starts."""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for support

import torch
from support.program_lines import NanochatRun

SEQUENCE = 64
BATCH = 8


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--interval", type=float, default=0.3, help="seconds per optimizer step")
    parser.add_argument("--num-iterations", type=int, default=2000)
    parser.add_argument("--gpu-peak-flops", type=float, default=float("inf"))
    parser.add_argument("--steps-file", required=True)
    args = parser.parse_args()

    torch.manual_seed(0)
    vocab, width = 256, 64
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, width), torch.nn.Linear(width, width), torch.nn.GELU(),
                                torch.nn.Linear(width, vocab))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    matmul_params = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    run = NanochatRun(num_iterations=args.num_iterations, total_batch_size=BATCH * SEQUENCE,
                      num_flops_per_token=6 * matmul_params, gpu_peak_flops=args.gpu_peak_flops)
    tokens = torch.randint(0, vocab, (BATCH, SEQUENCE + 1))
    print(f"Vocab size: {vocab:,}", flush=True)
    print(f"Total batch size {run.total_batch_size:,} => gradient accumulation steps: 1", flush=True)
    print("ready", file=sys.stderr, flush=True)
    steps_file = open(args.steps_file, "w", encoding="utf-8")
    deadline = t1 = time.time()
    for step in range(args.num_iterations):
        t0 = t1  # the end of the step before: see the module's docstring
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        model.zero_grad(set_to_none=True)
        train_loss_f = loss.item()
        deadline += args.interval
        time.sleep(max(0.0, deadline - time.time()))  # the device's share of the step
        t1 = time.time()
        steps_file.write(f"{step} {t1:.6f}\n")
        steps_file.flush()
        print(run.step_line(step, t1 - t0, train_loss_f), flush=True)


if __name__ == "__main__":
    main()
