"""A stand-in for modded-nanogpt's train_gpt.py on CPU: trains a tiny torch model one optimizer step every
``--interval`` seconds of wall time (step k ends at start + k·interval, the rest of the step asleep, as a GPU step's
host waits) and prints train_gpt.py's own step and validation lines (tests/support/program_lines.py) with its
train_time bookkeeping: the clock stopped around each validation (``--val-every`` steps, ``--val-seconds`` long).

Each step's end is also written to ``--steps-file`` (``N <unix time>`` a line), so a test knows the true rate.
Prints "ready" on stderr once training starts."""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/, for support

import torch
from support.program_lines import ModdedNanogptClock, modded_nanogpt_step, modded_nanogpt_val


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--interval", type=float, default=0.3, help="seconds per optimizer step")
    parser.add_argument("--train-steps", type=int, default=1285)
    parser.add_argument("--val-every", type=int, default=250, help="its val_loss_every")
    parser.add_argument("--val-seconds", type=float, default=1.0)
    parser.add_argument("--steps-file", required=True)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = torch.randn(32, 64), torch.randn(32, 64)
    print("Compiling model and warming up kernels (~7 minutes on first execution)", flush=True)
    print("Resetting Model", flush=True)
    print("ready", file=sys.stderr, flush=True)
    clock = ModdedNanogptClock()
    steps_file = open(args.steps_file, "w", encoding="utf-8")
    clock.start(time.perf_counter())
    deadline = time.time()
    for step in range(args.train_steps + 1):
        last_step = step == args.train_steps
        if last_step or (args.val_every > 0 and step % args.val_every == 0):
            clock.stop(time.perf_counter())  # "stop the clock"
            with torch.no_grad():
                val_loss = torch.nn.functional.mse_loss(model(inputs), targets).item()
            time.sleep(args.val_seconds)
            print(modded_nanogpt_val(step, args.train_steps, val_loss, clock.training_time_ms), flush=True)
            clock.start(time.perf_counter())  # "start the clock again"
            deadline = time.time()
        if last_step:
            break
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        deadline += args.interval
        time.sleep(max(0.0, deadline - time.time()))
        steps_file.write(f"{step + 1} {time.time():.6f}\n")
        steps_file.flush()
        print(modded_nanogpt_step(step, args.train_steps, clock.approx(time.perf_counter())), flush=True)


if __name__ == "__main__":
    main()
