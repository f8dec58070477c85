"""What one diagnosis costs on a full history: the CPU time of diagnose() (one process) and diagnose_job()
(every rank of a job) once the Monitor's history is full, replayed from real recordings.

Each recording's frames are laid end to end, re-timed one interval apart, until the history holds
``--frames`` of them (600: ten minutes at the default 1 s tick); then the last frame is diagnosed ``--calls``
times against the verdict before it, as a live Monitor does on every tick. It prints, per recording, the
median and the slowest call in this thread's CPU time (``time.thread_time``: what the call itself costs, not
the turns other work got on a busy machine) and in wall time:

    python benchmarks/diagnose_cost.py

The tests check the shape of this cost instead of its size (tests/unit/test_diagnose.py: a call does the same work
on 1,200 frames as on 600); the figures live here and in docs/benchmarks.md, not in a timed test.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from probes.diagnosis.job import diagnose_job  # noqa: E402
from probes.diagnosis.verdict import diagnose  # noqa: E402
from probes.frame import Frame  # noqa: E402
from probes.outputs.recording import read_recording  # noqa: E402

FIXTURES = HERE.parent / "tests" / "fixtures"
RECORDINGS = (
    FIXTURES / "h200" / "gpt2xl_s2.jsonl.gz",  # nanoGPT GPT-2 XL at steady state on an H200
    FIXTURES / "frames" / "real_gpu_data_starved.jsonl",  # a starved GPU: DataLoader workers in every sample
    FIXTURES / "frames" / "real_dataloader.jsonl",  # CPU only, four DataLoader workers
    FIXTURES / "frames" / "ddp_straggler.jsonl",  # a two-rank job: diagnose_job, every rank
)


def full_history(path: Path, frames: int) -> list[Frame]:
    """The recording's frames repeated end to end, one interval apart, until there are `frames` of them."""
    recorded = list(read_recording(path))
    interval = recorded[-1].interval_s or 1.0
    start = recorded[0].time
    return [dataclasses.replace(recorded[i % len(recorded)], seq=i, time=start + i * interval)
            for i in range(frames)]


def call_costs(history: list[Frame], calls: int) -> tuple[str, list[float], list[float]]:
    """Which diagnosis runs on this history, and the CPU and wall seconds of each of `calls` calls."""
    job = history[-1].job is not None  # the Monitor runs diagnose_job on every frame that has a job
    diagnosis = diagnose_job if job else diagnose
    previous = diagnosis(history[:-1])  # type: ignore[operator]
    cpu, wall = [], []
    for _ in range(calls):
        cpu_start, wall_start = time.thread_time(), time.perf_counter()
        previous = diagnosis(history, previous)  # type: ignore[operator]
        cpu.append(time.thread_time() - cpu_start)
        wall.append(time.perf_counter() - wall_start)
    return ("diagnose_job" if job else "diagnose"), cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=600, help="history length (default 600)")
    parser.add_argument("--calls", type=int, default=50, help="calls timed per recording (default 50)")
    args = parser.parse_args()
    print(f"{'recording':<34} {'diagnosis':<13} {'CPU ms median':>13} {'max':>6} {'wall ms median':>14}")
    for path in RECORDINGS:
        name, cpu, wall = call_costs(full_history(path, args.frames), args.calls)
        print(f"{path.name:<34} {name:<13} {statistics.median(cpu) * 1000:>13.2f} {max(cpu) * 1000:>6.2f} "
              f"{statistics.median(wall) * 1000:>14.2f}")


if __name__ == "__main__":
    main()
