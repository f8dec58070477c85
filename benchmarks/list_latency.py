"""How long `gputop --list` takes from the shell, beside two busy processes: the first answer a person gets.

It starts two pure-Python busy loops (`python -c "while True: pass"`, as a loaded node's other work) and a small
training job (tests/targets/job_train.py with one DataLoader worker), waits until the job has trained a step,
then runs the real `gputop --list` (`python -m tui --list` from a checkout) ``--runs`` times and prints each run's
wall time and CPU time (the child's user + system), then the median and the slowest:

    python benchmarks/list_latency.py [--runs 10] [--no-busy] [--checkout DIR ...]

``--checkout`` (repeatable; this checkout when none is given) times other checkouts too, for a before/after: e.g.
``git worktree add /tmp/before HEAD~1`` then ``--checkout /tmp/before --checkout .``. Their runs alternate, so a
machine whose other load comes and goes weighs on each alike. Each checkout's bytecode is compiled first (with
PYTHONDONTWRITEBYTECODE set, a fresh worktree would otherwise compile every module on every run).

The goal (issue 37): the list within 1.5 s beside two busy processes. The tests count work instead of timing it
(tests/e2e/test_list_first_answer_e2e.py: one census reading before the list is printed); the figures live in
docs/benchmarks.md, not in a timed test.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TARGETS = REPO / "tests" / "targets"
READY_TIMEOUT_S = 240.0  # torch's import on a busy 2-core machine
BUSY = "while True: pass"


def start_job(folder: Path) -> subprocess.Popen:
    """The training target from `folder`, once it has trained a step."""
    shutil.copy(TARGETS / "job_train.py", folder / "job_train.py")
    log = folder / "train.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("RANK", None)
    with open(log, "w") as out:
        job = subprocess.Popen([sys.executable, str(folder / "job_train.py"), "--workers", "1"], stdout=out,
                               stderr=subprocess.STDOUT, env=env, cwd=folder, start_new_session=True)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while "ready" not in log.read_text():
        if job.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the training target did not get ready:\n{log.read_text()[-2000:]}")
        time.sleep(0.2)
    return job


def one_run(checkout: Path) -> tuple[float, float, int]:
    """One `gputop --list` from `checkout`: its wall seconds, CPU seconds and the number of jobs it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "tui", "--list"], capture_output=True, text=True, check=False,
                          cwd=checkout, env=dict(os.environ, PYTHONPATH=str(checkout)))
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rows = max(0, len(done.stdout.strip().splitlines()) - 1)
    if done.returncode != 0:
        raise SystemExit(f"gputop --list from {checkout} exited {done.returncode}: {done.stderr.strip()}")
    return wall, cpu, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of each checkout")
    parser.add_argument("--no-busy", action="store_true", help="leave out the two busy processes")
    parser.add_argument("--checkout", action="append", type=Path, default=None, metavar="DIR",
                        help="a checkout of gputop to time (repeatable; default: this one)")
    args = parser.parse_args()
    checkouts = [path.resolve() for path in args.checkout or [REPO]]
    for checkout in checkouts:
        for package in ("probes", "tui"):
            compileall.compile_dir(checkout / package, quiet=1)
    busy = [] if args.no_busy else [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
    job = None
    try:
        with tempfile.TemporaryDirectory(prefix="gputop-list-latency-") as folder:
            job = start_job(Path(folder))
            print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start; {len(busy)} busy "
                  f"processes; {sys.executable} -m tui --list, {args.runs} runs of each checkout, alternating")
            walls: dict[Path, list[float]] = {checkout: [] for checkout in checkouts}
            cpus: dict[Path, list[float]] = {checkout: [] for checkout in checkouts}
            for run in range(args.runs):
                for checkout in checkouts:
                    wall, cpu, rows = one_run(checkout)
                    walls[checkout].append(wall)
                    cpus[checkout].append(cpu)
                    print(f"  {checkout} run {run + 1}: {wall:.2f} s wall, {cpu:.2f} s CPU, {rows} jobs listed")
            for checkout in checkouts:
                print(f"{checkout}: wall median {statistics.median(walls[checkout]):.2f} s, max "
                      f"{max(walls[checkout]):.2f} s; CPU median {statistics.median(cpus[checkout]):.2f} s, max "
                      f"{max(cpus[checkout]):.2f} s")
            print(f"load average {os.getloadavg()[0]:.2f} at the end")
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
        if job is not None:
            os.killpg(job.pid, 9)
            job.wait()


if __name__ == "__main__":
    main()
