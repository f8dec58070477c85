"""Node breakdown: where gputop's CPU goes on a node's job, by part, measured inside one run.

node_overhead.py says how much gputop costs a node's job; this says where it goes. It starts the same real
torchrun job (8 ranks x 8 DataLoader workers by default), runs gputop's headless command in this process at its
defaults, and over the steady part of the run (after ``--settle-seconds``) counts:

* each py-spy child's CPU (wait4), by kind (record window, dump, GIL window) and by the part of the process it
  sampled (rank, DataLoader worker, other), and the shapes (length @ rate) of the record windows;
* the thread CPU time spent in the functions of a tick that cost the most (the tree walk, the job tracker, the
  phase detector, the diagnosis, the tree policy's waits), and gputop's own CPU, main thread and others;
* the processes called up and the wakes, with why.

    python benchmarks/node_breakdown.py --ranks 8 --workers 8 --settle-seconds 30 --seconds 90

Wrapping a function in a timer costs a little: the figures are for comparing parts and before/after on the same
machine, not for the totals in docs/benchmarks.md (node_overhead.py measures those from outside).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.node_overhead import start_job, stop_job  # noqa: E402
from probes.jobs import tracker  # noqa: E402
from probes.monitoring import engine, monitor  # noqa: E402
from probes.sampling import pyspy, pyspy_binary, sampling_policy, tree_sampling  # noqa: E402
from probes.sensors import proctree  # noqa: E402

# (owner, attribute): the functions whose thread CPU time is summed
TIMED = [
    (engine.Engine, "tick"),
    (monitor.Monitor, "ingest"),
    (proctree.ProcessTreeProbe, "_walk_tree"),
    (proctree.ProcessTreeProbe, "_sample"),
    (proctree.ProcessTreeProbe, "_tcp_sockets"),
    (tracker.JobTracker, "update"),
    (sampling_policy.PhaseChangeDetector, "observe"),
    (tree_sampling.TreeSamplingPolicy, "wait_s"),
    (monitor, "diagnose_job"),
]


class Breakdown:
    """What one run spent, counted from ``measuring_from`` (time.monotonic()) on."""

    def __init__(self) -> None:
        self.measuring_from = float("inf")
        self.lock = threading.Lock()
        self.children: collections.Counter[tuple[str, str]] = collections.Counter()
        self.child_cpu: collections.Counter[tuple[str, str]] = collections.Counter()
        self.shapes: collections.Counter[tuple[str, str]] = collections.Counter()
        self.function_cpu: collections.Counter[str] = collections.Counter()
        self.called_up: collections.Counter[str] = collections.Counter()
        self.wakes: collections.Counter[str] = collections.Counter()

    @property
    def measuring(self) -> bool:
        return time.monotonic() >= self.measuring_from

    def install(self) -> None:
        """Wrap the sampler's child bookkeeping, the tree policy's call-ups, the wakes and TIMED."""
        counts = self

        original_init = pyspy_binary.PyspyRun.__init__

        def init(run, target_pid, argv, *args, **kwargs):
            run.breakdown_argv = list(argv)
            original_init(run, target_pid, argv, *args, **kwargs)

        original_tree_init = tree_sampling.TreeSamplingPolicy.__init__
        trees = []  # each sampler's tree policy: which part of the tree a child sampled

        def tree_init(policy, *args, **kwargs):
            original_tree_init(policy, *args, **kwargs)
            trees.append(policy)

        original_finish = pyspy_binary.PyspyChildren.finish

        def finish(children, child):
            original_finish(children, child)
            if not counts.measuring:
                return
            argv = getattr(child, "breakdown_argv", ["?", "?"])
            kind = "gil" if "--gil" in argv else argv[1]
            member = next((t._members[child.target_pid] for t in trees if child.target_pid in t._members), None)
            part = (member.role if member is not None else None) or "other"
            with counts.lock:
                counts.children[(kind, part)] += 1
                counts.child_cpu[(kind, part)] += child.cpu_seconds
                if kind == "record":
                    shape = f"{argv[argv.index('--duration') + 1]} s @ {argv[argv.index('--rate') + 1]} Hz"
                    counts.shapes[(part, shape)] += 1

        original_called_up = tree_sampling.TreeSamplingPolicy.called_up

        def called_up(policy, pids, now):
            pids = list(pids)
            if counts.measuring:
                for pid in pids:
                    member = policy._members.get(pid)
                    counts.called_up[(member.role if member is not None else None) or "other"] += 1
            return original_called_up(policy, pids, now)

        original_wake = pyspy.StackSampler.wake

        def wake(sampler, reason, *args, **kwargs):
            if counts.measuring:
                counts.wakes[re.sub(r"\d+", "N", reason)[:100]] += 1
            return original_wake(sampler, reason, *args, **kwargs)

        pyspy_binary.PyspyRun.__init__ = init
        tree_sampling.TreeSamplingPolicy.__init__ = tree_init
        pyspy_binary.PyspyChildren.finish = finish
        tree_sampling.TreeSamplingPolicy.called_up = called_up
        pyspy.StackSampler.wake = wake
        for owner, name in TIMED:
            self._time(owner, name)

    def _time(self, owner, name: str) -> None:
        original = getattr(owner, name)
        label = f"{getattr(owner, '__name__', owner).rsplit('.', 1)[-1]}.{name}"
        counts = self

        def timed(*args, **kwargs):
            if not counts.measuring:
                return original(*args, **kwargs)
            started = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                spent = time.thread_time() - started
                with counts.lock:
                    counts.function_cpu[label] += spent

        setattr(owner, name, timed)


def thread_cpu_seconds() -> dict[int, float]:
    ticks = os.sysconf("SC_CLK_TCK")
    seconds = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as handle:
                fields = handle.read().rpartition(")")[2].split()
        except OSError:
            continue
        seconds[int(tid)] = (int(fields[11]) + int(fields[12])) / ticks
    return seconds


def report(counts: Breakdown, seconds: float, own_s: float, main_s: float) -> None:
    print(f"over {seconds:.0f} s, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}:")
    print(f"  gputop's own {own_s / seconds:.4f} cores (main thread {main_s / seconds:.4f}, "
          f"other threads {(own_s - main_s) / seconds:.4f})")
    total = sum(counts.child_cpu.values())
    print(f"  py-spy children {total / seconds:.4f} cores:")
    for key in sorted(counts.child_cpu):
        print(f"    {key[0]:>6} of {key[1]:<6}: {counts.children[key]:4d} runs, {counts.child_cpu[key]:6.2f} CPU-s, "
              f"{counts.child_cpu[key] / seconds:.4f} cores")
    print("  record windows, length @ rate:")
    for (part, shape), n in sorted(counts.shapes.items()):
        print(f"    {part:<6} {shape:>12}: {n}")
    print("  thread CPU in the parts of a tick, cores:")
    for label, spent in counts.function_cpu.most_common():
        print(f"    {label:<40} {spent / seconds:.4f}")
    print(f"  called up: {dict(counts.called_up) or 'none'}")
    for reason, n in counts.wakes.most_common(8):
        print(f"  wake x{n}: {reason}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--settle-seconds", type=float, default=30.0)
    parser.add_argument("--seconds", type=float, default=90.0, help="measured, after the settle")
    parser.add_argument("--port", type=int, default=29811)
    args = parser.parse_args()
    counts = Breakdown()
    counts.install()
    from tui.cli import main as gputop

    with tempfile.TemporaryDirectory() as tmp:
        job = start_job(args.ranks, args.workers, args.step_ms, Path(tmp) / "progress", args.port)
        try:
            marks: dict[str, tuple[float, float]] = {}

            def measure() -> None:
                time.sleep(args.settle_seconds)
                counts.measuring_from = time.monotonic()
                times, threads = os.times(), thread_cpu_seconds()
                marks["from"] = (times.user + times.system, threads.get(os.getpid(), 0.0))
                time.sleep(args.seconds)
                times, threads = os.times(), thread_cpu_seconds()
                counts.measuring_from = float("inf")
                marks["to"] = (times.user + times.system, threads.get(os.getpid(), 0.0))

            watcher = threading.Thread(target=measure, daemon=True)
            watcher.start()
            try:
                gputop(["--pid", str(job.pid), "--no-gpu", "--snapshot", os.devnull,
                        "--duration", f"{args.settle_seconds + args.seconds + 5:g}"])
            except SystemExit:
                pass
            watcher.join()
            (own_from, main_from), (own_to, main_to) = marks["from"], marks["to"]
            report(counts, args.seconds, own_to - own_from, main_to - main_from)
        finally:
            stop_job(job)


if __name__ == "__main__":
    main()
