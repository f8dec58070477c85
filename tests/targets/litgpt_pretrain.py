"""Target: litgpt's ``pretrain`` training loop as its fit() runs it, printing its own line, at a known pace.

litgpt cannot share the test environment's Hugging Face packages (it pins huggingface-hub below the version
transformers needs), so this is its loop, read from litgpt/pretrain.py's fit(): each micro-batch bumps
``iter_num`` and runs a real forward and backward of a tiny torch model; every ``--accumulation``-th micro-batch
also clips, steps the optimizer and bumps ``step_count``; and every ``log_interval`` optimizer steps (a line only on
a micro-batch that stepped: ``log_iter_interval = log_interval × accumulation``) it prints, with fabric.print's
f-string, the time of that one micro-batch, ``t1 - iter_t0``, as ``iter time``.

The pace is fixed by the clock, not by work: a micro-batch lasts ``--micro-s`` and the optimizer step adds
``--step-s`` to the one that runs it, so the printed micro-batch is longer than the others, as on a real run
(there 1.03 s against a 0.80 s mean; litgpt's ``iter time × 4`` said 4.12 s for a 3.20 s step). Each printed line's
wall time and step go to ``--truth`` (one ``time step`` pair a line), for the test to time the steps itself.
"""

from __future__ import annotations

import argparse
import time
from datetime import timedelta

import torch
from torch import nn


def sleep_until(deadline: float) -> None:
    remaining = deadline - time.perf_counter()
    if remaining > 0:
        time.sleep(remaining)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--accumulation", type=int, default=4, help="micro-batches per optimizer step")
    parser.add_argument("--log-interval", type=int, default=1, help="optimizer steps between lines")
    parser.add_argument("--micro-s", type=float, default=0.15, help="wall time of one micro-batch")
    parser.add_argument("--step-s", type=float, default=0.25, help="what the optimizer step adds to its micro-batch")
    parser.add_argument("--max-iters", type=int, default=100_000)
    parser.add_argument("--truth", required=True)
    args = parser.parse_args()

    torch.manual_seed(42)
    torch.set_num_threads(1)
    print("Seed set to 42", flush=True)
    model = nn.Sequential(nn.Embedding(64, 32), nn.Linear(32, 64))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    print(f"Total parameters: {sum(p.numel() for p in model.parameters()):,}", flush=True)
    state = {"iter_num": 0, "step_count": 0}
    log_iter_interval = args.log_interval * args.accumulation
    initial_iter = state["iter_num"]
    val_loss = "n/a"
    losses: list[float] = []
    total_t0 = time.perf_counter()
    with open(args.truth, "a", encoding="utf-8") as truth:
        while state["iter_num"] < args.max_iters:
            state["iter_num"] += 1
            iter_t0 = time.perf_counter()
            input_ids = torch.randint(0, 64, (4, 16))
            is_accumulating = state["iter_num"] % args.accumulation != 0
            logits = model(input_ids)
            loss = nn.functional.cross_entropy(logits.reshape(-1, 64), input_ids.reshape(-1))
            (loss / args.accumulation).backward()
            losses.append(loss.item())
            sleep_until(iter_t0 + args.micro_s)
            if not is_accumulating:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad()
                state["step_count"] += 1
                sleep_until(iter_t0 + args.micro_s + args.step_s)
            if state["iter_num"] % log_iter_interval == 0:
                running = sum(losses[-args.accumulation:]) / len(losses[-args.accumulation:])
                t1 = time.perf_counter()
                metrics = {
                    "loss": running,
                    "iter": state["iter_num"],
                    "step": state["step_count"],
                    "epoch": 0,
                    "iter_time": t1 - iter_t0,
                    "remaining_time": (t1 - total_t0) / (state["iter_num"] - initial_iter)
                    * (args.max_iters - state["iter_num"]),
                }
                print(
                    f"Epoch {metrics['epoch'] + 1} | iter {metrics['iter']} step {metrics['step']} |"
                    f" loss train: {metrics['loss']:.3f},"
                    f" val: {val_loss} |"
                    f" iter time: {metrics['iter_time'] * 1000:.2f} ms"
                    f"{' (step)' if not is_accumulating else ''}"
                    f" remaining time: {timedelta(seconds=int(metrics['remaining_time']))!s}",
                    flush=True,
                )
                truth.write(f"{time.time()} {state['step_count']}\n")
                truth.flush()


if __name__ == "__main__":
    main()
