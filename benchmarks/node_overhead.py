"""Node benchmark: what gputop costs on a whole node's job, and how much it slows the job.

Starts a real torchrun job (tests/targets/job_torchrun.py over job_train.py: gloo, CPU, a tiny DDP model) of
``--ranks`` ranks with ``--workers`` DataLoader workers each (8 x 8: 73 processes, an 8-GPU node's shape), then
alternates phases — no monitor, gputop at its defaults from each checkout named — and repeats them, so drift on
a busy machine hits every arm alike. For each phase it reports the job's steps/s (rank 0's, which DDP keeps in
step with every rank) and gputop's CPU with its py-spy children, in cores, over the steady part of the phase
(after ``--settle-seconds``, so start-up and the first close look are left out; both are reported apart).

    python benchmarks/node_overhead.py --ranks 8 --workers 8 --rounds 3
    python benchmarks/node_overhead.py --baseline /tmp/gputop-main     # before (that checkout) and after (this)
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TARGETS = REPO / "tests" / "targets"


def read_progress(path: Path) -> tuple[int, float]:
    steps, when = path.read_text().split()
    return int(steps), float(when)


def tree_cpu_seconds(proc: psutil.Process) -> tuple[float, float]:
    """(CPU of the process itself, of its children: reaped ones and those running, py-spy windows in flight)."""
    try:
        times = proc.cpu_times()
        children = times.children_user + times.children_system
        for child in proc.children(recursive=True):
            try:
                child_times = child.cpu_times()
                children += child_times.user + child_times.system
            except psutil.Error:
                pass
        return times.user + times.system, children
    except psutil.Error:
        return 0.0, 0.0


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def run_phase(arm: str, repo: Path | None, job_pid: int, settle_s: float, seconds: float, progress: Path) -> dict:
    """One phase: no monitor (repo None) or gputop from ``repo``; the job's pace and gputop's CPU over its
    steady part."""
    time.sleep(2.0)  # let the previous phase's py-spy children go
    monitor = None
    started = time.monotonic()
    if repo is not None:
        monitor = subprocess.Popen(
            [sys.executable, "-m", "tui", "--pid", str(job_pid), "--no-gpu",
             "--duration", f"{settle_s + seconds + 60:g}", "--snapshot", os.devnull],
            cwd=repo, env=dict(os.environ, PYTHONPATH=str(repo)), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
    watched = psutil.Process(monitor.pid) if monitor is not None else None
    time.sleep(settle_s)
    settle_own, settle_children = tree_cpu_seconds(watched) if watched else (0.0, 0.0)
    start_steps, start_t = read_progress(progress)
    time.sleep(seconds)
    end_own, end_children = tree_cpu_seconds(watched) if watched else (0.0, 0.0)
    end_steps, end_t = read_progress(progress)
    if monitor is not None:
        monitor.send_signal(signal.SIGTERM)
        try:
            monitor.wait(timeout=60)
        except subprocess.TimeoutExpired:
            monitor.kill()
            monitor.wait()
    wall = end_t - start_t
    return {"arm": arm, "steps_per_s": (end_steps - start_steps) / wall if wall > 0 else 0.0,
            "cores": (end_own + end_children - settle_own - settle_children) / seconds,
            "own_cores": (end_own - settle_own) / seconds,
            "settle_cores": (settle_own + settle_children) / max(settle_s, 1e-9),
            "load": load_average(), "elapsed": time.monotonic() - started}


def start_job(ranks: int, workers: int, step_ms: float, progress: Path, port: int) -> subprocess.Popen:
    job = subprocess.Popen(
        [sys.executable, str(TARGETS / "job_torchrun.py"), str(port), str(ranks), "0", "--workers", str(workers),
         "--step-ms", f"{step_ms:g}", "--progress", str(progress)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    expected = 1 + ranks + ranks * workers
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if job.poll() is not None:
            raise SystemExit(f"the job exited with {job.returncode} before it was ready")
        try:
            count = 1 + len(psutil.Process(job.pid).children(recursive=True))
        except psutil.Error:
            count = 0
        if progress.exists() and count >= expected:
            return job
        time.sleep(1.0)
    raise SystemExit("the job was not ready within 600 s")


def stop_job(job: subprocess.Popen) -> None:
    """Kill the agent, its ranks and their workers (torchrun starts each rank in a session of its own)."""
    try:
        family = [psutil.Process(job.pid), *psutil.Process(job.pid).children(recursive=True)]
    except psutil.Error:
        family = []
    for process in family:
        try:
            process.kill()
        except psutil.Error:
            pass
    job.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--settle-seconds", type=float, default=40.0)
    parser.add_argument("--phase-seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port", type=int, default=29731)
    parser.add_argument("--baseline", type=Path, default=None, metavar="REPO",
                        help="also run gputop from this checkout (arm 'base'), alternating with this one")
    args = parser.parse_args()
    arms: list[tuple[str, Path | None]] = [("none", None)]
    if args.baseline is not None:
        arms.append(("base", args.baseline.resolve()))
    arms.append(("gputop", REPO))
    with tempfile.TemporaryDirectory() as tmp:
        progress = Path(tmp) / "progress"
        job = start_job(args.ranks, args.workers, args.step_ms, progress, args.port)
        try:
            processes = 1 + len(psutil.Process(job.pid).children(recursive=True))
            print(f"torchrun PID {job.pid}: {args.ranks} ranks x {args.workers} workers, {processes} processes; "
                  f"{args.settle_seconds:g} s settle + {args.phase_seconds:g} s measured per phase, "
                  f"{args.rounds} rounds; {os.cpu_count()} CPUs", flush=True)
            results: dict[str, list[dict]] = {arm: [] for arm, _ in arms}
            for round_number in range(1, args.rounds + 1):
                for arm, repo in arms:
                    result = run_phase(arm, repo, job.pid, args.settle_seconds, args.phase_seconds, progress)
                    results[arm].append(result)
                    print(f"round {round_number} {arm:>6}: {result['steps_per_s']:6.2f} steps/s, "
                          f"{result['cores']:.3f} cores steady, {result['own_cores']:.3f} of them gputop's own "
                          f"({result['settle_cores']:.3f} while settling), "
                          f"load {result['load']}", flush=True)
            base = statistics.median(r["steps_per_s"] for r in results["none"])
            print(f"{'arm':>6} {'steps/s':>8} {'slowdown':>9} {'cores':>7} {'own':>7} {'py-spy':>7}  (medians)")
            for arm, _ in arms:
                speed = statistics.median(r["steps_per_s"] for r in results[arm])
                cores = statistics.median(r["cores"] for r in results[arm])
                own = statistics.median(r["own_cores"] for r in results[arm])
                print(f"{arm:>6} {speed:>8.2f} {100.0 * (1.0 - speed / base):>8.1f}% {cores:>7.3f} {own:>7.3f} "
                      f"{cores - own:>7.3f}")
        finally:
            stop_job(job)


if __name__ == "__main__":
    main()
