"""Target: one training loop that logs each step in every framework's own format, each to its own file.

``format_writer.py DIR --interval 2.0`` takes one optimizer step every INTERVAL seconds of wall time (by the
clock, not by work: step k ends at start + k·INTERVAL) and appends that step's lines to ``DIR/<format>.log`` as
the framework prints them (format strings from each framework's logging code; see tests/fixtures/logs/). Where
a framework prints only a throughput, the writer prints the throughput the measured step time gives, so a reader
must derive the time per step as it would from the real framework. Each file first gets the lines the framework
prints before training (DeepSpeed's config dump, Composer's config block). Prints "ready" once every file exists.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

MICRO_BATCHES = 4  # litgpt and DeepSpeed: micro-batches per optimizer step
SAMPLES_PER_STEP = 32  # DeepSpeed's train_batch_size
WORDS_PER_UPDATE = 4096  # fairseq's wpb


def stamp(now: float, comma: bool = True) -> str:
    base = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    return f"{base},{int(now % 1 * 1000):03d}" if comma else base


def preamble() -> dict[str, list[str]]:
    now = time.time()
    return {
        "deepspeed": [f"[{stamp(now)}] [INFO] [config.py:988:print]   train_batch_size ............. "
                      f"{SAMPLES_PER_STEP}"],
        "composer": ["******************************", "Config:", "num_gpus_per_node: 1",
                     "******************************"],
    }


def step_lines(step: int, dt: float, wall: float, now: float) -> dict[str, list[str]]:
    """Each format's lines for optimizer step ``step`` (1-based) that took ``dt`` seconds, ``wall`` into training."""
    loss = 10.0 / step
    ms = dt * 1000.0
    return {
        "megatron": [f" [{stamp(now, comma=False)}] iteration {step:8d}/{100000:8d} | consumed samples: "
                     f"{step * 128:12d} | elapsed time per iteration (ms): {ms:.1f} | learning rate: 3.000E-04 | "
                     f"global batch size:   128 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 1.000 | "
                     "number of skipped iterations:   0 | number of nan iterations:   0 |"],
        "torchtitan": [f"[titan] {stamp(now)} - root - INFO - \x1b[31mstep: {step:2}  \x1b[32mloss: {loss:7.4f}  "
                       f"\x1b[33mgrad_norm:  1.0000  \x1b[34mmemory: 30.12GiB(38.02%)  \x1b[34mtps: "
                       f"{round(8192 / dt):,}  \x1b[36mtflops: 120.45  \x1b[35mmfu: 12.18%\x1b[39m"],
        "deepspeed": [f"[{stamp(now)}] [INFO] [timer.py:260:stop] epoch=0/micro_step={step * MICRO_BATCHES}/"
                      f"global_step={step}, RunningAvgSamplesPerSec={SAMPLES_PER_STEP / dt}, "
                      f"CurrSamplesPerSec={SAMPLES_PER_STEP / dt}, MemAllocated=6.01GB, MaxMemAllocated=19.52GB"],
        "litgpt": [f"Epoch 1 | iter {step * MICRO_BATCHES} step {step} | loss train: {loss:.3f}, val: n/a | "
                   f"iter time: {ms / MICRO_BATCHES:.2f} ms (step) remaining time: 0:10:00"],
        "llm_c": [f"step {step:4d}/{100000} | loss {loss:7.6f} (+0.01z)| norm 1.0000 (+0.01z)| lr 6.00e-04 | "
                  f"{ms:.2f} ms | 41.2% bf16 MFU | {524288 / dt:.0f} tok/s"],
        "fairseq": [f"{stamp(now, comma=False)} | INFO | train_inner | epoch 001:  {step:5d} / 100000 "
                    f"loss={loss:.3f}, nll_loss={loss:.3f}, ppl=2.0, wps={WORDS_PER_UPDATE / dt:.1f}, "
                    f"ups={1 / dt:.2f}, wpb={WORDS_PER_UPDATE}, bsz=128, num_updates={step}, lr=0.0005, "
                    f"gnorm=1.0, train_wall={wall:.0f}, gb_free=10.2, wall={wall:.0f}",
                    f"{stamp(now, comma=False)} | INFO | train_inner | " + json.dumps(
                        {"epoch": 1, "update": 0.001, "loss": f"{loss:.3f}", "wps": f"{WORDS_PER_UPDATE / dt:.1f}",
                         "ups": f"{1 / dt:.2f}", "wpb": str(WORDS_PER_UPDATE), "num_updates": str(step)})],
        "composer": [f"[batch={step}/100000]:", f"\t Train time/batch: {step}",
                     f"\t Train loss/train/total: {loss:.4f}", f"\t Train wall_clock/train: {wall:.4f}"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds of wall time per optimizer step")
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args()

    files = {name: open(os.path.join(args.dir, f"{name}.log"), "a", encoding="utf-8")
             for name in step_lines(1, 1.0, 0.0, time.time())}
    for name, lines in preamble().items():
        files[name].write("".join(f"{line}\n" for line in lines))
    for handle in files.values():
        handle.flush()
    print("ready", flush=True)
    start = last = time.time()
    for step in range(1, args.steps + 1):
        time.sleep(max(0.0, start + step * args.interval - time.time()))
        now = time.time()
        for name, lines in step_lines(step, now - last, now - start, now).items():
            files[name].write("".join(f"{line}\n" for line in lines))  # one write per step, as one print would
            files[name].flush()
        last = now
    sys.exit(0)


if __name__ == "__main__":
    main()
