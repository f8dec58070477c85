"""Soak test: does a long headless gputop run stay flat (memory, fds, threads, py-spy children)?

Starts a small real training loop (a torch MLP fed by a DataLoader with 2 fork workers, so py-spy has
three processes to sample; it alternates a data-bound and a compute-bound phase every
``--phase-seconds`` so gputop's adaptive sampler keeps changing rate and its verdict keeps moving),
then runs the real gputop command against it, headless, at its defaults:

    python -m tui --pid TARGET --snapshot OUT/snapshot.json --duration SECONDS --no-gpu \\
                  --record OUT/recording.jsonl        # left out with --no-record

Every ``--interval`` seconds it samples the gputop process with psutil: RSS, open fds, threads, its
py-spy children alive, zombies among its children (and the pids of those zombies), CPU time, and the
size of the recording (which grows by design: one JSON line per frame). The series goes to
``OUT/series.csv`` as it is taken; ``OUT/summary.json`` and the printed summary say:

* RSS after warm-up against RSS at the end, and the largest growth after warm-up, in %. Warm-up ends
  once gputop's frame history (probes/monitoring/history.py, 600 frames = 10 min at the default 1 s tick) has
  filled, plus a minute, so memory that grows by design until then is not counted; a run too short
  for that takes its first half as warm-up (``--warmup`` overrides).
* fds, threads and py-spy children: min/max after warm-up, the max during warm-up, the end value, and a
  least-squares slope over the post-warm-up part. "Accumulating" means the end value rose above the
  warm-up max by more than a small slack, or the slope amounts to more than that slack over the run.
* zombies: the most seen at once, and "persistent" zombies (the same pid seen as a zombie for longer
  than ``PERSISTENT_ZOMBIE_S``: gputop reaps each py-spy child through a pidfd as it exits, so a
  zombie that lives for seconds is a reaping bug).
* gputop's exit status, whether the snapshot was written, whether the target stayed alive, and
  whether any py-spy was left running on the target's processes after gputop exited.

The exit status is 0 when every check holds (RSS growth within ``--max-rss-growth``, 5% by default).

    python benchmarks/soak.py                                  # the hour: --duration 3600
    python benchmarks/soak.py --duration 300 --interval 2 --out /tmp/soak5
    python benchmarks/soak.py --duration 3600 --no-record      # leave recording (disk) out of it

It cleans up after itself: the target and gputop are killed, with every process under them, when it
ends, on Ctrl-C and on SIGTERM (and on SIGHUP unless started under nohup). The target also ends by
itself a few minutes after ``--duration`` in case the soak is killed with SIGKILL.
tests/e2e/test_soak.py runs a CI-sized version (about 40 s) through ``run_soak``.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

GPUTOP_TICK_S = 1.0  # gputop's default --interval
HISTORY_FRAMES = 600  # probes.monitoring.history.DEFAULT_HISTORY_FRAMES (read from there when importable)
try:
    from probes.monitoring.history import DEFAULT_HISTORY_FRAMES as HISTORY_FRAMES
except ImportError:  # pragma: no cover - the soak still runs from a bare checkout
    pass
SNAPSHOT_SCHEMA = "gputop.snapshot/2"  # probes.outputs.snapshot.SNAPSHOT_SCHEMA (read from there when importable)
try:
    from probes.outputs.snapshot import SNAPSHOT_SCHEMA
except ImportError:  # pragma: no cover
    pass

PERSISTENT_ZOMBIE_S = 5.0
# How far above its warm-up max a count may end before it counts as accumulating. py-spy children come
# and go (one record window and one dump per sampled process), and each running child holds one pidfd.
SLACK = {"fds": 8, "threads": 4, "pyspy_children": 3}
TARGET_READY_TIMEOUT_S = 180.0
EXIT_GRACE_S = 60.0

FIELDS = ["t_s", "rss_mb", "fds", "threads", "pyspy_children", "zombie_children", "children",
          "cpu_s", "children_cpu_s", "record_bytes", "target_procs", "zombie_pids"]


# --- the target ------------------------------------------------------------------------------------


def run_target(argv: list[str]) -> None:
    """A small CPU training loop fed by a 2-worker DataLoader; phases alternate every --phase-seconds.

    data phase: each item costs a 10 ms wait (storage-like) plus ~1 ms CPU, the main step 20 ms: the
    main thread waits on the workers. compute phase: items are cheap and the main thread spends ~15 ms
    of CPU in torch per step. Prints a nanoGPT-style ``iter N: loss X, time Yms`` line every 20 steps
    (gputop reads it from stdout, a file) and "ready" once every worker has delivered a batch.
    """
    import torch
    from torch.utils.data import DataLoader, Dataset

    parser = argparse.ArgumentParser(prog="soak.py _target")
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--phase-seconds", type=float, default=120.0)
    args = parser.parse_args(argv)
    start = time.time()

    def phase() -> str:
        return "data" if int((time.time() - start) // args.phase_seconds) % 2 == 0 else "compute"

    def burn_cpu(seconds: float) -> int:
        total, until = 0, time.thread_time() + seconds
        while time.thread_time() < until:
            total += sum(i * i for i in range(200))
        return total

    class SoakDataset(Dataset):
        def __len__(self) -> int:
            return 10**9  # one epoch outlives the soak: workers are never restarted

        def __getitem__(self, index: int):
            if phase() == "data":
                time.sleep(0.010)
                burn_cpu(0.001)
            x = torch.randn(64)
            return x, (x.sum() > 0).long()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SoakDataset(), batch_size=8, num_workers=2, multiprocessing_context="fork")
    weights = torch.randn(128, 128)
    deadline = time.monotonic() + args.seconds
    last = time.perf_counter()
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if phase() == "compute":
            until = time.thread_time() + 0.015
            acc = weights
            while time.thread_time() < until:
                acc = torch.tanh(acc @ weights)
        time.sleep(0.020)  # the "GPU" part of the step
        if step == 1:
            print("ready", flush=True)
        if step % 20 == 0:
            now = time.perf_counter()
            print(f"iter {step}: loss {loss.item():.4f}, time {(now - last) * 1000 / 20:.2f}ms", flush=True)
            last = now
        if time.monotonic() > deadline:
            break


# --- process handling ------------------------------------------------------------------------------


def kill_tree(proc: subprocess.Popen | None) -> None:
    """SIGKILL proc and every process under it (and its session's group), then reap proc."""
    if proc is None:
        return
    import psutil

    try:
        procs = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        procs = []
    for p in [*procs]:
        try:
            p.kill()
        except psutil.Error:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # started with start_new_session: its group is its pid
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def wait_for_line(path: Path, text: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if any(line.strip() == text for line in path.read_text(errors="replace").splitlines()):
                return
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"target exited with {proc.returncode} before printing {text!r}; see {path}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"target printed no {text!r} within {timeout:g} s; see {path}")
        time.sleep(0.2)


def sample(gputop, target, t0: float, record_path: Path | None) -> dict | None:
    """One row of the series; None once gputop is gone."""
    import psutil

    try:
        with gputop.oneshot():
            rss = gputop.memory_info().rss
            fds = gputop.num_fds()
            threads = gputop.num_threads()
            cpu = gputop.cpu_times()
        kids = gputop.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    pyspy = zombies = 0
    zombie_pids = []
    for kid in kids:
        try:
            if kid.status() == psutil.STATUS_ZOMBIE:
                zombies += 1
                zombie_pids.append(kid.pid)
            elif "py-spy" in kid.name():
                pyspy += 1
        except psutil.NoSuchProcess:
            continue  # ended between the listing and the look
    try:
        target_procs = 0 if target.status() == psutil.STATUS_ZOMBIE else 1 + len(target.children(recursive=True))
    except psutil.NoSuchProcess:
        target_procs = 0
    try:
        record_bytes = record_path.stat().st_size if record_path is not None else 0
    except OSError:
        record_bytes = 0
    return {
        "t_s": round(time.monotonic() - t0, 2),
        "rss_mb": round(rss / 2**20, 3),
        "fds": fds,
        "threads": threads,
        "pyspy_children": pyspy,
        "zombie_children": zombies,
        "children": len(kids),
        "cpu_s": round(cpu.user + cpu.system, 3),
        "children_cpu_s": round(cpu.children_user + cpu.children_system, 3),
        "record_bytes": record_bytes,
        "target_procs": target_procs,
        "zombie_pids": " ".join(map(str, zombie_pids)),
    }


def pyspy_left_on(pids: set[int]) -> list[int]:
    """py-spy processes still running against any of ``pids`` (after gputop exited, there should be none)."""
    import psutil

    left = []
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        info = proc.info
        if "py-spy" not in (info.get("name") or "") or info.get("status") == psutil.STATUS_ZOMBIE:
            continue
        cmdline = info.get("cmdline") or []
        for flag, value in itertools.pairwise(cmdline):
            if flag == "--pid" and value.isdigit() and int(value) in pids:
                left.append(proc.pid)
    return left


# --- the summary -----------------------------------------------------------------------------------


def default_warmup(duration: float) -> float:
    """Until gputop's frame history has filled, plus a minute; at most half the run, at least 10% or 60 s."""
    return min(max(60.0, 0.1 * duration, HISTORY_FRAMES * GPUTOP_TICK_S + 60.0), duration / 2)


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys against xs (0 for fewer than two distinct xs)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


def persistent_zombies(rows: list[dict], longer_than_s: float = PERSISTENT_ZOMBIE_S) -> list[int]:
    """Pids seen as zombie children in samples more than ``longer_than_s`` apart."""
    first_seen: dict[int, float] = {}
    persistent = set()
    for row in rows:
        for pid in map(int, str(row.get("zombie_pids") or "").split()):
            first_seen.setdefault(pid, row["t_s"])
            if row["t_s"] - first_seen[pid] > longer_than_s:
                persistent.add(pid)
    return sorted(persistent)


def summarize(rows: list[dict], warmup_s: float, max_rss_growth_pct: float = 5.0) -> dict:
    """Numbers and checks from a series (``rows`` as ``sample`` returns them, in time order)."""
    summary: dict = {"samples": len(rows), "warmup_s": warmup_s}
    if not rows:
        summary["checks"] = {"samples_taken": False}
        return summary
    t_first = rows[0]["t_s"]
    warm = [r for r in rows if r["t_s"] - t_first <= warmup_s]
    post = [r for r in rows if r["t_s"] - t_first > warmup_s] or rows[-1:]
    span_h = max((post[-1]["t_s"] - post[0]["t_s"]) / 3600, 1e-9)
    summary["span_s"] = round(rows[-1]["t_s"] - t_first, 1)
    summary["post_warmup_samples"] = len(post)
    checks: dict = {}

    rss = [r["rss_mb"] for r in post]
    rss_warm, rss_end = rss[0], rss[-1]
    rss_slope = slope([r["t_s"] for r in post], rss) * 3600
    summary["rss_mb"] = {
        "at_start": rows[0]["rss_mb"],
        "after_warmup": rss_warm,
        "end": rss_end,
        "max": max(rss),
        "end_growth_pct": round(100 * (rss_end - rss_warm) / rss_warm, 2) if rss_warm else None,
        "max_growth_pct": round(100 * (max(rss) - rss_warm) / rss_warm, 2) if rss_warm else None,
        "slope_mb_per_h": round(rss_slope, 3),
    }
    growth = summary["rss_mb"]["end_growth_pct"]
    checks["rss_growth_within_limit"] = growth is not None and growth <= max_rss_growth_pct

    for name in ("fds", "threads", "pyspy_children", "zombie_children"):
        values = [r[name] for r in post]
        warm_max = max((r[name] for r in warm), default=values[0])
        per_h = slope([r["t_s"] for r in post], values) * 3600
        slack = SLACK.get(name, 2)
        accumulating = values[-1] > warm_max + slack or per_h * span_h > slack
        summary[name] = {
            "warmup_max": warm_max, "min": min(values), "max": max(values), "end": values[-1],
            "slope_per_h": round(per_h, 3), "accumulating": accumulating,
        }
        if name != "zombie_children":
            checks[f"{name}_not_accumulating"] = not accumulating
    zombies = persistent_zombies(rows)
    summary["zombie_children"]["persistent_pids"] = zombies
    summary["zombie_children"]["max_whole_run"] = max(r["zombie_children"] for r in rows)
    checks["no_persistent_zombies"] = not zombies
    summary["pyspy_children"]["max_whole_run"] = max(r["pyspy_children"] for r in rows)
    summary["target_procs"] = {"min": min(r["target_procs"] for r in rows),
                               "max": max(r["target_procs"] for r in rows)}
    checks["target_alive_throughout"] = summary["target_procs"]["min"] >= 1

    cpu = [r["cpu_s"] + r["children_cpu_s"] for r in post]
    if len(post) > 1:
        summary["cpu_cores_after_warmup"] = round((cpu[-1] - cpu[0]) / (post[-1]["t_s"] - post[0]["t_s"]), 4)
    summary["record_bytes_end"] = rows[-1]["record_bytes"]
    summary["checks"] = checks
    return summary


def format_summary(s: dict) -> str:
    lines = [f"soak: {s['samples']} samples over {s.get('span_s', 0)} s, warm-up {s['warmup_s']:g} s"]
    if "rss_mb" in s:
        r = s["rss_mb"]
        lines.append(
            f"  RSS: {r['at_start']:.1f} MB at start, {r['after_warmup']:.1f} after warm-up, "
            f"{r['end']:.1f} at the end ({r['end_growth_pct']:+.2f}%), max growth {r['max_growth_pct']:+.2f}%, "
            f"slope {r['slope_mb_per_h']:+.2f} MB/h")
        for name in ("fds", "threads", "pyspy_children", "zombie_children"):
            v = s[name]
            lines.append(
                f"  {name}: min {v['min']} max {v['max']} after warm-up (warm-up max {v['warmup_max']}), "
                f"end {v['end']}, slope {v['slope_per_h']:+.2f}/h: "
                f"{'ACCUMULATING' if v['accumulating'] else 'not accumulating'}")
        z = s["zombie_children"]
        lines.append(f"  zombies: at most {z['max_whole_run']} at once, persistent: {z['persistent_pids'] or 'none'}")
        if "cpu_cores_after_warmup" in s:
            lines.append(f"  gputop CPU after warm-up (py-spy included): {s['cpu_cores_after_warmup']:.3f} cores")
        lines.append(f"  recording: {s['record_bytes_end'] / 2**20:.1f} MB (grows by design, one line a frame)")
    for key in ("gputop_exit", "snapshot_written", "pyspy_left_after_exit", "verdict"):
        if key in s:
            lines.append(f"  {key}: {s[key]}")
    failed = [k for k, ok in s.get("checks", {}).items() if not ok]
    lines.append("  checks: " + ("all hold" if not failed else "FAILED: " + ", ".join(failed)))
    return "\n".join(lines)


# --- the run ---------------------------------------------------------------------------------------


def run_soak(duration: float, interval: float, out: str | Path, *, record: bool = True,
             warmup: float | None = None, phase_seconds: float = 120.0, max_rss_growth_pct: float = 5.0,
             echo=None) -> dict:
    """Run the soak; write OUT/series.csv, OUT/summary.json and the logs; return the summary."""
    import psutil

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    warmup = default_warmup(duration) if warmup is None else warmup
    snapshot_path = out / "snapshot.json"
    record_path = out / "recording.jsonl" if record else None
    for stale in (snapshot_path, record_path, out / "series.csv", out / "summary.json"):
        if stale is not None and stale.exists():
            stale.unlink()
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO))
    target = gputop = None
    target_pids: set[int] = set()
    rows: list[dict] = []
    summary: dict = {}
    interrupted = False
    try:
        target_log = out / "target.log"
        with target_log.open("w") as log:
            target = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "_target", "--seconds", f"{duration + 300:g}",
                 "--phase-seconds", f"{phase_seconds:g}"],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True,
            )
        wait_for_line(target_log, "ready", target, TARGET_READY_TIMEOUT_S)
        target_ps = psutil.Process(target.pid)
        target_pids = {target.pid} | {p.pid for p in target_ps.children(recursive=True)}
        cmd = [sys.executable, "-m", "tui", "--pid", str(target.pid), "--snapshot", str(snapshot_path),
               "--duration", f"{duration:g}", "--no-gpu"]
        if record_path is not None:
            cmd += ["--record", str(record_path)]
        summary["command"] = " ".join(cmd)
        if echo:
            echo(f"soak: target PID {target.pid} ({len(target_pids)} processes); running {summary['command']}")
        with (out / "gputop.log").open("w") as log:
            gputop = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                      start_new_session=True)
        summary["gputop_pid"], summary["target_pid"] = gputop.pid, target.pid
        gputop_ps = psutil.Process(gputop.pid)
        t0 = time.monotonic()
        deadline = t0 + duration + EXIT_GRACE_S + 0.1 * duration
        next_sample = t0
        with (out / "series.csv").open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=FIELDS)
            writer.writeheader()
            handle.flush()
            while gputop.poll() is None and time.monotonic() < deadline:
                row = sample(gputop_ps, target_ps, t0, record_path)
                if row is not None:
                    rows.append(row)
                    writer.writerow(row)
                    handle.flush()
                    try:
                        target_pids |= {p.pid for p in target_ps.children(recursive=True)}
                    except psutil.NoSuchProcess:
                        pass
                next_sample += interval
                # poll often so gputop's exit is seen at once, but sample only every `interval`
                while gputop.poll() is None and time.monotonic() < next_sample:
                    time.sleep(min(0.2, max(0.0, next_sample - time.monotonic())))
        try:
            summary["gputop_exit"] = gputop.wait(timeout=1)
        except subprocess.TimeoutExpired:
            summary["gputop_exit"] = f"still running {EXIT_GRACE_S + 0.1 * duration:g} s after --duration"
        # gputop's close() kills and reaps its py-spy children before it exits; give a moment anyway
        left_deadline = time.monotonic() + 5
        while (left := pyspy_left_on(target_pids)) and time.monotonic() < left_deadline:
            time.sleep(0.2)
        summary["pyspy_left_after_exit"] = left
    except KeyboardInterrupt:
        interrupted = True
    finally:
        # a second Ctrl-C must not cut the cleanup short
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        try:
            if interrupted and gputop is not None and gputop.poll() is None:
                gputop.terminate()  # gputop stops on SIGTERM and still writes its snapshot
                try:
                    summary["gputop_exit"] = gputop.wait(timeout=15)
                    summary["pyspy_left_after_exit"] = pyspy_left_on(target_pids)
                except subprocess.TimeoutExpired:
                    pass
            kill_tree(gputop)
            kill_tree(target)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    summary.update(summarize(rows, warmup, max_rss_growth_pct))
    checks = summary["checks"]
    if interrupted:
        summary["interrupted"] = True
        checks["completed"] = False
    checks["gputop_exit_0"] = summary.get("gputop_exit") == 0
    snapshot = None
    try:
        snapshot = json.loads(snapshot_path.read_text())
    except (OSError, ValueError):
        pass
    summary["snapshot_written"] = isinstance(snapshot, dict) and snapshot.get("schema") == SNAPSHOT_SCHEMA
    checks["snapshot_written"] = summary["snapshot_written"]
    if isinstance(snapshot, dict) and isinstance(snapshot.get("verdict"), dict):
        v = snapshot["verdict"]
        summary["verdict"] = f"{v.get('bottleneck')} / {v.get('liveness')}"
    checks["no_pyspy_left_after_exit"] = summary.get("pyspy_left_after_exit") == []
    summary["ok"] = all(checks.values())
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_target":
        run_target(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=3600.0, help="gputop's --duration, seconds (3600)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples (5)")
    parser.add_argument("--out", default="soak-out", help="folder for series.csv, summary.json and logs")
    parser.add_argument("--warmup", type=float, default=None,
                        help="seconds not counted for growth (default: history fill + 60 s, at most half)")
    parser.add_argument("--phase-seconds", type=float, default=120.0,
                        help="the target alternates data-bound and compute-bound phases this long (120)")
    parser.add_argument("--no-record", action="store_true", help="run gputop without --record")
    parser.add_argument("--max-rss-growth", type=float, default=5.0, help="allowed RSS growth after warm-up, %%")
    args = parser.parse_args()

    def stop(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:  # under nohup, stay ignored
        signal.signal(signal.SIGHUP, stop)
    summary = run_soak(args.duration, args.interval, args.out, record=not args.no_record, warmup=args.warmup,
                       phase_seconds=args.phase_seconds, max_rss_growth_pct=args.max_rss_growth,
                       echo=lambda text: print(text, flush=True))
    print(format_summary(summary), flush=True)
    print(f"soak: series in {Path(args.out) / 'series.csv'}, summary in {Path(args.out) / 'summary.json'}", flush=True)
    sys.exit(0 if summary["ok"] else 1)


if __name__ == "__main__":
    main()
