"""Scrape-cost benchmark: what one /metrics scrape costs gputop (target: under 5 ms).

A scrape reads the latest views only, so its cost is building the metric families and encoding them. The
views are constructed (no sampling): one torchrun job of N ranks on N GPUs (full GPU readings, GPM, clock
event reasons, a sampled stack per rank) beside M lone training processes, with a full history each. It
times, per scrape: the collector and the text encoding in-process (CPU time and wall time), and a real HTTP
GET against prometheus_client's server on 127.0.0.1 (the round trip Prometheus sees), text and OpenMetrics.

    python benchmarks/scrape.py                      # 8 ranks on 8 GPUs + 3 lone processes, 500 scrapes
    python benchmarks/scrape.py --ranks 64 --lone 0  # a big node
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry, generate_latest, start_http_server

from probes.frame import (
    CpuReading,
    Frame,
    GpuDevice,
    GpuReading,
    JobInfo,
    JobVerdict,
    ProcessSample,
    RankVerdict,
    StackFrame,
    StacksReading,
    TargetInfo,
    ThreadStack,
    Verdict,
)
from probes.outputs.exporter import GputopCollector, WatchedView
from probes.view import MonitorView, Pace

HISTORY = 120  # frames per view, as a Monitor keeps them (only the latest is read)
SITE = "/opt/venv/lib/python3.11/site-packages/"
STACK = (StackFrame("ProcessGroup.allreduce", SITE + "torch/distributed/distributed_c10d.py", 2501),
         StackFrame("all_reduce", SITE + "torch/distributed/distributed_c10d.py", 2530),
         StackFrame("train_step", "/home/u/train.py", 88), StackFrame("<module>", "/home/u/train.py", 120))


def job_view(ranks: int, launcher: int) -> MonitorView:
    devices = tuple(GpuDevice(index=i, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{i:08x}-0000", sm_clock_mhz=1755,
                              max_sm_clock_mhz=1980, power_w=610.0, power_limit_w=700.0, util_gpu_pct=100.0,
                              clock_event_reasons=("sw_power_cap",), gpm_sm_active_pct=80.0,
                              gpm_sm_occupancy_pct=40.0, gpm_tensor_active_pct=55.0, gpm_dram_bw_pct=35.0)
                    for i in range(ranks))
    pids = [launcher + 1 + r for r in range(ranks)]
    processes = (ProcessSample(pid=launcher, ppid=1, role="launcher", name="python", cpu_pct=1.0),
                 *(ProcessSample(pid=pid, ppid=launcher, role="rank", name="python", cpu_pct=99.0, rank=r,
                                 gpu_index=r) for r, pid in enumerate(pids)))
    threads = tuple(ThreadStack(pid=pid, tid=pid, name="MainThread", frames=STACK) for pid in pids)
    frames = tuple(Frame(seq=i, time=1e9 + i, interval_s=1.0, target=TargetInfo(pid=launcher, alive=True),
                         processes=processes, cpu=CpuReading(quota_cpus=64.0, throttled_fraction=0.0,
                                                             throttled_seconds_total=1.0),
                         gpu=GpuReading(available=True, devices=devices),
                         stacks=StacksReading(available=True, threads=threads),
                         job=JobInfo(kind="torchrun", attached_pid=launcher, root_pid=launcher, launcher_pid=launcher,
                                     run_id="bench-run", world_size=ranks, rank_pids=tuple(pids)))
                   for i in range(HISTORY))
    rank_verdicts = tuple(RankVerdict(rank=r, pid=pid, gpu_index=r, cpu_pct=99.0, collective_wait_ratio=0.3,
                                      samples=50, verdict=Verdict("comms_bound", "progressing", 0.8, stalled_s=0.0))
                          for r, pid in enumerate(pids))
    job = JobVerdict(verdict=Verdict("comms_bound", "progressing", 0.8, stalled_s=0.0), finding="straggler",
                     ranks=rank_verdicts, responsible_rank=0)
    return MonitorView(frames=frames, verdict=job.verdict, job=job,
                       pace=Pace(seconds_per_iter=1.2, tokens_per_s=4e5))


def lone_view(pid: int) -> MonitorView:
    frames = tuple(Frame(seq=i, time=1e9 + i, interval_s=1.0, target=TargetInfo(pid=pid, alive=True),
                         processes=(ProcessSample(pid=pid, ppid=1, role="main", name="python", cpu_pct=100.0),),
                         stacks=StacksReading(available=True, threads=(ThreadStack(pid=pid, tid=pid,
                                                                                   frames=STACK[2:]),)))
                   for i in range(HISTORY))
    return MonitorView(frames=frames, verdict=Verdict("cpu_bound", "progressing", 0.7, stalled_s=0.0))


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def report(name: str, seconds: list[float]) -> None:
    ms = [1000.0 * s for s in seconds]
    print(f"{name:<34} median {statistics.median(ms):6.2f} ms   p95 {percentile(ms, 0.95):6.2f} ms   "
          f"max {max(ms):6.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8, help="ranks (and GPUs) of the job")
    parser.add_argument("--lone", type=int, default=3, help="lone training processes beside it")
    parser.add_argument("--scrapes", type=int, default=500)
    args = parser.parse_args()

    views = (WatchedView(job_view(args.ranks, 1000), mfu_floor=0.3),
             *(WatchedView(lone_view(5000 + i)) for i in range(args.lone)))
    registry = CollectorRegistry()
    registry.register(GputopCollector(lambda: views, host="bench-node"))
    body = generate_latest(registry)
    print(f"{args.ranks} ranks on {args.ranks} GPUs + {args.lone} lone processes: "
          f"{sum(1 for line in body.splitlines() if not line.startswith(b'#'))} samples, {len(body)} bytes\n")

    for _ in range(20):  # warm the caches (stack classification, imports)
        generate_latest(registry)
    wall, cpu = [], []
    for _ in range(args.scrapes):
        started, started_cpu = time.perf_counter(), time.process_time()
        generate_latest(registry)
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    report("collect + encode, wall", wall)
    report("collect + encode, CPU", cpu)

    httpd, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    url = f"http://127.0.0.1:{httpd.server_address[1]}/metrics"
    try:
        for accept, name in (("text/plain", "HTTP GET, text, round trip"),
                             ("application/openmetrics-text; version=1.0.0", "HTTP GET, OpenMetrics, round trip")):
            request = urllib.request.Request(url, headers={"Accept": accept})
            times = []
            for _ in range(args.scrapes):
                started = time.perf_counter()
                with urllib.request.urlopen(request, timeout=10) as response:
                    response.read()
                times.append(time.perf_counter() - started)
            report(name, times)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


if __name__ == "__main__":
    main()
