"""Overhead benchmark: the target's slowdown and the monitor's CPU, gputop versus bare py-spy.

Runs benchmarks/overhead_target.py (a CPU training loop beside ~100 idle threads) pinned to one core,
and the monitors pinned to another. Phases alternate — none, bare `py-spy record`, gputop headless — and
repeat, so drift on a noisy machine hits every arm alike. For each phase it reports the target's steps/s
and the monitor's CPU (its own and its children's, from wait4 rusage).

    python benchmarks/overhead.py --rates 5 10 --phase-seconds 20 --rounds 3
    python benchmarks/overhead.py --rates 5 --arms gputop-nostacks   # the engine without py-spy
    python benchmarks/overhead.py --rates 5 --arms pyspy pyspy-gil   # what a GIL window adds
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def read_progress(path: Path) -> tuple[int, float]:
    steps, when = path.read_text().split()
    return int(steps), float(when)


def wait4_cpu(proc: subprocess.Popen) -> float:
    """Wait for proc and return the CPU seconds it and its reaped children used."""
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    return usage.ru_utime + usage.ru_stime


def run_phase(kind: str, pid: int, rate: float, seconds: float, progress: Path, monitor_cpu: int) -> dict:
    pin = ["taskset", "-c", str(monitor_cpu)]
    if kind == "pyspy":
        cmd = pin + ["py-spy", "record", "--pid", str(pid), "--rate", f"{rate:g}", "--nonblocking",
                     "--idle", "--threads", "--format", "raw", "--duration", f"{seconds:g}", "-o", os.devnull]
    elif kind == "pyspy-gil":  # what a GIL window adds (probes/sampling/pyspy.py): the GIL holder's stack per look
        cmd = pin + ["py-spy", "record", "--pid", str(pid), "--rate", f"{rate:g}", "--nonblocking", "--gil",
                     "--threads", "--format", "raw", "--duration", f"{seconds:g}", "-o", os.devnull]
    elif kind == "gputop":
        cmd = pin + [sys.executable, "-m", "tui", "--pid", str(pid), "--rate", f"{rate:g}", "--no-gpu",
                     "--duration", f"{seconds:g}", "--snapshot", os.devnull]
    elif kind == "gputop-default":  # no --rate: adaptive, 5 Hz settling to 1 Hz
        cmd = pin + [sys.executable, "-m", "tui", "--pid", str(pid), "--no-gpu",
                     "--duration", f"{seconds:g}", "--snapshot", os.devnull]
    elif kind == "gputop-nostacks":  # the engine's own /proc and cgroup reads, without py-spy
        cmd = pin + [sys.executable, "-m", "tui", "--pid", str(pid), "--no-stacks", "--no-gpu",
                     "--duration", f"{seconds:g}", "--snapshot", os.devnull]
    else:
        cmd = None
    time.sleep(1.0)  # let the previous phase's effects settle
    start_steps, start_t = read_progress(progress)
    cpu = 0.0
    if cmd is None:
        time.sleep(seconds)
    else:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
        cpu = wait4_cpu(proc)
    end_steps, end_t = read_progress(progress)
    return {"kind": kind, "steps_per_s": (end_steps - start_steps) / (end_t - start_t), "cpu_s": cpu,
            "wall_s": end_t - start_t}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", type=float, nargs="+", default=[5.0, 10.0])
    parser.add_argument("--phase-seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--arms", nargs="+", default=["pyspy", "gputop"],
                        choices=["pyspy", "pyspy-gil", "gputop", "gputop-default", "gputop-nostacks"],
                        help="monitors to compare; each round runs 'none' before each of them")
    args = parser.parse_args()
    ncpu = os.cpu_count() or 1
    target_cpu, monitor_cpu = 0, 1 % ncpu
    with tempfile.TemporaryDirectory() as tmp:
        progress = Path(tmp) / "progress"
        target = subprocess.Popen(["taskset", "-c", str(target_cpu), sys.executable,
                                   str(HERE / "overhead_target.py"), str(progress)])
        try:
            while not progress.exists():
                time.sleep(0.1)
            time.sleep(3.0)  # warm-up
            print(f"target PID {target.pid} on CPU {target_cpu}; monitors on CPU {monitor_cpu}; "
                  f"{args.phase_seconds:g} s phases x {args.rounds} rounds")
            print(f"{'rate':>5} {'monitor':>8} {'steps/s':>9} {'slowdown':>9} {'CPU (cores)':>12}")
            for rate in args.rates:
                results: dict[str, list[dict]] = {kind: [] for kind in ["none", *args.arms]}
                for _ in range(args.rounds):
                    for arm in args.arms:
                        for kind in ("none", arm):
                            phase = run_phase(kind, target.pid, rate, args.phase_seconds, progress, monitor_cpu)
                            results[kind].append(phase)
                            # Each phase as it ends: on a noisy machine the spread says more than the median.
                            print(f"  phase {kind}: {phase['steps_per_s']:.1f} steps/s, "
                                  f"{phase['cpu_s'] / phase['wall_s']:.3f} cores", flush=True)
                base = statistics.median(r["steps_per_s"] for r in results["none"])
                for kind in results:
                    speed = statistics.median(r["steps_per_s"] for r in results[kind])
                    cores = statistics.median(r["cpu_s"] / r["wall_s"] for r in results[kind])
                    slowdown = 100.0 * (1.0 - speed / base)
                    print(f"{rate:>5g} {kind:>8} {speed:>9.1f} {slowdown:>8.1f}% {cores:>12.3f}")
        finally:
            target.kill()
            target.wait()


if __name__ == "__main__":
    main()
