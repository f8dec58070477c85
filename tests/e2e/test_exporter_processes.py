"""The /metrics collector on constructed views (probes/outputs/exporter.py), the HTTP endpoint it is served on, the
`gputop serve` command's input checks, the follow census's rules, and the shipped alert rules under promtool.

Real targets scraped by a real Prometheus are in tests/e2e/test_exporter_e2e.py."""

from __future__ import annotations

import dataclasses
import shutil
import socket
import subprocess
import sys

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from support.frames import FORWARD, LOCK_WAIT, PEER_LOCK_WAIT, PID, main_count, make_frame, proc
from support.nanogpt_case import gpu_bound_frames
from support.paths import REPO

from probes.frame import (
    CpuReading,
    GpuDevice,
    GpuReading,
    JobInfo,
    JobVerdict,
    MonitorOverhead,
    RankVerdict,
    TargetInfo,
    ThreadStack,
    Verdict,
)
from probes.monitoring.monitor import fold
from probes.outputs.exporter import GputopCollector, WatchedView
from probes.reference.baseline import load_comparison_inputs
from probes.view import MonitorView
from tui.serve import Server

RULES = REPO / "deploy" / "prometheus"
SECRET = "hunter2-do-not-export"


def exposition(*views: WatchedView, host: str = "node1") -> str:
    registry = CollectorRegistry()
    registry.register(GputopCollector(lambda: views, host=host))
    return generate_latest(registry).decode()


def seed_case_view() -> MonitorView:
    """nanoGPT GPT-2 XL at 21 s/iter on an H200 (the seed case): gpu_bound, 52% MFU."""
    return fold(gpu_bound_frames(), comparison=load_comparison_inputs(None, "gpt2-xl", 1_048_576), replay=False).view


def deadlock_view() -> MonitorView:
    threads = (ThreadStack(pid=PID, tid=PID, name="MainThread", idle=True, frames=LOCK_WAIT),
               ThreadStack(pid=PID, tid=PID + 1, name="metrics-flusher", idle=True, frames=PEER_LOCK_WAIT))
    frames = [make_frame(i, counts=[main_count(LOCK_WAIT, idle=True)] if i in (0, 2, 6) else [], threads=threads,
                         cpu=None if i == 0 else 0.0) for i in range(12)]
    # A secret on the command line and in the environment: neither may reach /metrics.
    target = TargetInfo(pid=PID, alive=True, cmdline=("python", "train.py", f"--token={SECRET}"),
                        environment={"WANDB_API_KEY": SECRET, "CUDA_VISIBLE_DEVICES": "0"})
    frames = [dataclasses.replace(f, target=target) for f in frames]
    return fold(frames, hang_after_s=5.0, replay=False).view


def job_view(run_id: str | None = "run-42", slurm_job: str | None = None) -> MonitorView:
    """A torchrun job of two ranks on GPUs 0 and 1; rank 1 is the straggler, rank 0 waits for it."""
    devices = tuple(GpuDevice(index=i, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{i}aaa", sm_clock_mhz=1400,
                              max_sm_clock_mhz=1980, power_w=500.0, power_limit_w=700.0,
                              clock_event_reasons=("sw_power_cap",), gpm_tensor_active_pct=40.0,
                              gpm_dram_bw_pct=30.0)
                    for i in range(2))
    launcher, rank0, rank1 = 500, 501, 502
    processes = [proc(pid=launcher, role="launcher", cpu=0.0),
                 proc(pid=rank0, role="rank", cpu=30.0, rank=0, gpu_index=0),
                 proc(pid=rank1, role="rank", cpu=100.0, rank=1, gpu_index=1)]
    threads = (ThreadStack(pid=rank1, tid=rank1, name="MainThread", frames=FORWARD),)
    frame = make_frame(0, processes=processes, gpu=GpuReading(available=True, devices=devices), threads=threads,
                       cpu_reading=CpuReading(quota_cpus=4.0, throttled_fraction=0.3, throttled_seconds_total=12.5))
    frame = dataclasses.replace(frame, **{"target": TargetInfo(pid=launcher, alive=True),
                               "job": JobInfo(kind="torchrun", attached_pid=launcher, root_pid=launcher,
                                              launcher_pid=launcher, run_id=run_id, world_size=2,
                                              rank_pids=(rank0, rank1), slurm_job=slurm_job),
                               "overhead": MonitorOverhead(monitor_cpu_pct=3.0, sampler_cpu_pct=12.0)})
    ranks = (RankVerdict(rank=0, pid=rank0, gpu_index=0, cpu_pct=30.0, collective_wait_ratio=0.7, samples=40,
                         verdict=Verdict("comms_bound", "progressing", 0.8, stalled_s=0.4)),
             RankVerdict(rank=1, pid=rank1, gpu_index=1, cpu_pct=100.0, collective_wait_ratio=0.05, samples=40,
                         verdict=Verdict("gpu_bound", "progressing", 0.9, stalled_s=0.2)))
    job = JobVerdict(verdict=Verdict("gpu_bound", "progressing", 0.8), finding="straggler", ranks=ranks,
                     responsible_rank=1)
    return MonitorView(frames=(frame,), verdict=job.verdict, job=job)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (apt-get install prometheus; .ci/run does it as root)")
def test_exposition_passes_promtool_check_metrics():
    text = exposition(WatchedView(seed_case_view(), mfu_floor=0.3), WatchedView(deadlock_view()),
                      WatchedView(job_view()))
    result = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (apt-get install prometheus; .ci/run does it as root)")
def test_shipped_alert_rules_pass_promtool_check_and_their_unit_tests():
    check = subprocess.run(["promtool", "check", "rules", "gputop-rules.yml"], cwd=RULES, capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    tested = subprocess.run(["promtool", "test", "rules", "gputop-rules.test.yml"], cwd=RULES, capture_output=True,
                            text=True, timeout=60)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def run_gputop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tui", *args], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


@pytest.mark.slow
@pytest.mark.parametrize("args, says", [
    (("serve",), "gputop serve --pid PID, --slurm-job JOBID, or gputop serve --follow"),
    (("serve", "--pid", "999999999"), "no process with PID 999999999"),
    (("serve", "--follow", "--log", "x.log"), "use it with --pid"),
    (("serve", "--pid", "1", "--follow"), "not allowed with argument"),
    (("serve", "--follow", "--listen", "nowhere"), "--listen wants HOST:PORT"),
    (("serve", "--follow", "--mfu-floor", "35"), "a ratio between 0 and 1"),
    (("serve", "--follow", "--process-only"), "use it with --pid, not --follow"),
])
def test_serve_usage_errors_are_one_line_and_exit_2(args, says):
    result = run_gputop(*args)
    assert result.returncode == 2 and says in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_port_in_use_is_a_usage_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_gputop("serve", "--follow", "--no-gpu", "--no-stacks", "--listen", f"127.0.0.1:{port}")
    assert result.returncode == 2, result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "--listen HOST:PORT" in result.stderr


# --- follow mode's rules, on constructed process tables ------------------------------------------------------


PYTHON_TRAIN = ("python", "train.py")


@pytest.mark.slow
def test_every_watched_target_shares_one_nvml_read_per_tick():
    """Two real targets, each on its own fake GPU: one NVML read per tick, each target sees its own GPU."""
    from support.fake_pynvml import GIB, FakeGpu, FakeNvml

    from probes.monitoring.engine import EngineConfig
    from probes.sensors.nvml import NvmlGpuProbe, SharedGpuReading

    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) for _ in range(2)]
    try:
        fake = FakeNvml([FakeGpu(uuid=f"GPU-{i}", processes=[(p.pid, GIB)]) for i, p in enumerate(sleepers)])
        server = Server(EngineConfig(sample_stacks=False, process_only=True), pid=sleepers[0].pid, follow=False,
                        hang_after_s=5.0, log=lambda line: None, gpu=SharedGpuReading(NvmlGpuProbe(fake)))
        assert server.node.watch(sleepers[1].pid, "test")
        for _ in range(3):
            server.step()
        gpus_in_target = {v.view.latest.target.pid: [d.index for d in v.view.latest.gpu.devices if d.in_target]
                          for v in server.views()}
        assert gpus_in_target == {sleepers[0].pid: [0], sleepers[1].pid: [1]}
        assert fake.call_count("nvmlDeviceGetPowerUsage") == 3 * 2  # three ticks, two GPUs: not once per target
        server.close()
        assert fake.call_count("nvmlShutdown") == 1
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not installed (apt-get install prometheus; .ci/run does it as root)")
def test_dashboard_queries_are_valid_promql(tmp_path):
    import json

    dashboard = json.loads((REPO / "deploy" / "grafana" / "gputop-job.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]  # a row has none
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for i, expr in enumerate(exprs):
        expr = expr.replace("$training_job", "run-42").replace("$host", ".*").replace("$job_id", "4242.0")
        lines += [f"      - record: dashboard_query_{i}", f"        expr: {json.dumps(expr)}"]
    (tmp_path / "dashboard.yml").write_text("\n".join(lines) + "\n")
    result = subprocess.run(["promtool", "check", "rules", str(tmp_path / "dashboard.yml")], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
