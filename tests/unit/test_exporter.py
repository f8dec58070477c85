"""The /metrics collector on constructed views (probes/outputs/exporter.py), the HTTP endpoint it is served on, the
`gputop serve` command's input checks, the follow census's rules, and the shipped alert rules under promtool.

Real targets scraped by a real Prometheus are in tests/e2e/test_exporter_e2e.py."""

from __future__ import annotations

import dataclasses
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.parser import text_string_to_metric_families
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
from probes.gpu_metrics import GPM_METRICS
from probes.jobs.follow import _top, find_training_jobs
from probes.jobs.launchers import launcher_of_process
from probes.monitoring.monitor import fold
from probes.outputs.exporter import GputopCollector, WatchedView, build_metrics, job_id_label, training_job_label
from probes.reference.baseline import load_comparison_inputs
from probes.sensors.proctree import NodeProcess
from probes.view import MonitorView
from tui.serve import ListenError, Server, parse_listen

RULES = REPO / "deploy" / "prometheus"
SECRET = "hunter2-do-not-export"


def exposition(*views: WatchedView, host: str = "node1") -> str:
    registry = CollectorRegistry()
    registry.register(GputopCollector(lambda: views, host=host))
    return generate_latest(registry).decode()


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """{(sample name, labels): value} of an exposition."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: dict, name: str, **labels) -> float | None:
    """The one sample of `name` whose labels include `labels` (None when absent; fails when ambiguous)."""
    matches = [v for (n, ls), v in found.items() if n == name and set(labels.items()) <= dict(ls).items()]
    assert len(matches) <= 1, (name, labels, matches)
    return matches[0] if matches else None


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


def test_the_h200_recording_exports_what_the_screen_says(tmp_path):
    # gpt2xl_s2 replayed with the compiled probe (tests/fixtures/h200): the screen says 53% MFU and 98% of the
    # reference's rate; the metrics say the same. Without the job's tokens per iteration neither is claimed.
    from support.h200 import fixture, recording, remade_recording

    from probes.outputs.recording import read_header, read_recording
    from probes.reference.pace_inputs import recorded_inputs, replayed_comparison_inputs

    probe = str(fixture("gpt2xl_probe_compile.json"))
    path = remade_recording("gpt2xl_s2", tmp_path)
    inputs = replayed_comparison_inputs(recorded_inputs(read_header(path)), probe, None, None)
    view = fold(read_recording(path), hang_after_s=5.0, comparison=inputs, replay=False).view
    target = {"host": "node1", "training_job": "pid-494", "pid": "494"}
    found = samples(exposition(WatchedView(view)))
    assert value(found, "gputop_mfu_ratio", **target) == pytest.approx(0.531, abs=0.001)
    assert value(found, "gputop_reference_rate_ratio", **target) == pytest.approx(0.977, abs=0.002)
    assert value(found, "gputop_tokens_per_second", **target) == pytest.approx(131_072 / 2.56339)
    (tmp_path / "plain").mkdir()
    unknown = recording("gpt2xl_s2", tmp_path / "plain")
    header_without_tokens = {**read_header(unknown), "model": None, "tokens_per_iter": None}
    assumed = replayed_comparison_inputs(recorded_inputs(header_without_tokens), probe, None, None)
    found = samples(exposition(WatchedView(fold(read_recording(unknown), comparison=assumed, replay=False).view)))
    for name in ("gputop_reference_rate_ratio", "gputop_tokens_per_second"):
        assert value(found, name, **target) is None, name
    # The MFU left is nanoGPT's own printed one re-based to the H200's peak: it rests on no tokens per iteration.
    assert value(found, "gputop_mfu_ratio", **target) == pytest.approx(1.6877 * 312 / 989.5, abs=0.001)


def test_seed_case_verdict_pace_and_gpu_as_metrics():
    found = samples(exposition(WatchedView(seed_case_view(), mfu_floor=0.35)))
    target = {"host": "node1", "training_job": f"pid-{PID}", "pid": str(PID)}
    assert value(found, "gputop_bottleneck", gputop_bottleneck="gpu_bound", **target) == 1.0
    assert value(found, "gputop_bottleneck", gputop_bottleneck="data_bound", **target) == 0.0
    assert sum(v for (n, _), v in found.items() if n == "gputop_bottleneck") == 1.0  # one state at a time
    assert value(found, "gputop_liveness", gputop_liveness="progressing", **target) == 1.0
    assert 0.0 < value(found, "gputop_verdict_confidence_ratio", **target) <= 1.0
    assert value(found, "gputop_iteration_duration_seconds", **target) == 21.0
    assert value(found, "gputop_tokens_per_second", **target) == pytest.approx(1_048_576 / 21.0)
    assert value(found, "gputop_mfu_ratio", **target) == pytest.approx(0.518, abs=0.001)
    assert value(found, "gputop_mfu_floor_ratio", **target) == 0.35
    gpu = {"host": "node1", "gpu": "0"}
    assert value(found, "gputop_gpu_sm_clock_hertz", **gpu) == 1.98e9
    assert value(found, "gputop_gpu_sm_clock_max_hertz", **gpu) == 1.98e9
    assert value(found, "gputop_gpu_power_watts", **gpu) == 690.0
    assert value(found, "gputop_gpu_power_limit_watts", **gpu) == 700.0
    assert value(found, "gputop_gpu_sm_active_ratio", **gpu) == pytest.approx(0.92)
    assert value(found, "gputop_gpu_info", model="NVIDIA H200", **gpu) == 1.0
    assert value(found, "gputop_watched_targets", host="node1") == 1.0


def test_hung_target_states_its_silence_and_one_responsible_frame_never_a_stack_or_a_secret():
    text = exposition(WatchedView(deadlock_view()))
    found = samples(text)
    assert value(found, "gputop_liveness", gputop_liveness="hung") == 1.0
    assert value(found, "gputop_liveness", gputop_liveness="progressing") == 0.0
    assert value(found, "gputop_last_progress_age_seconds") >= 5.0
    infos = [dict(ls) for (n, ls), _ in found.items() if n == "gputop_responsible_frame_info"]
    # Where the verdict's evidence says it is stuck: "stuck at train.py:27 in rotate_logs".
    assert infos == [{"host": "node1", "training_job": f"pid-{PID}", "job_id": "", "rank": "", "pid": str(PID),
                      "function": "rotate_logs", "file": "train.py", "line": "27", "called_from": ""}], infos
    assert SECRET not in text and "WANDB" not in text and "CUDA_VISIBLE_DEVICES" not in text
    assert "PEER" not in text and "flush_metrics" not in text  # one frame of one thread, not the stacks
    assert value(found, "gputop_iteration_duration_seconds") is None  # no log: no series, not a NaN


def test_exited_target_has_no_progress_age_and_no_responsible_frame():
    frames = [make_frame(i, counts=[main_count(FORWARD)], cpu=100.0) for i in range(4)] + \
        [make_frame(4, alive=False)]
    found = samples(exposition(WatchedView(fold(frames, replay=False).view)))
    assert value(found, "gputop_liveness", gputop_liveness="exited") == 1.0
    assert value(found, "gputop_last_progress_age_seconds") is None
    assert not [n for n, _ in found if n == "gputop_responsible_frame_info"]


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


def test_job_ranks_carry_rank_pid_gpu_labels_wait_ratio_and_the_straggler():
    found = samples(exposition(WatchedView(job_view())))
    job = {"host": "node1", "training_job": "run-42"}
    assert value(found, "gputop_job_finding", gputop_job_finding="straggler", **job) == 1.0
    assert value(found, "gputop_job_finding", gputop_job_finding="shared", **job) == 0.0
    assert value(found, "gputop_rank_collective_wait_ratio", rank="0", pid="501", gpu="0", uuid="GPU-0aaa",
                 **job) == 0.7
    assert value(found, "gputop_rank_collective_wait_ratio", rank="1", pid="502", gpu="1", uuid="GPU-1aaa",
                 **job) == 0.05
    assert value(found, "gputop_rank_responsible", rank="1", **job) == 1.0
    assert value(found, "gputop_rank_responsible", rank="0", **job) == 0.0
    assert value(found, "gputop_rank_bottleneck", gputop_rank_bottleneck="comms_bound", rank="0", **job) == 1.0
    assert value(found, "gputop_rank_liveness", gputop_rank_liveness="progressing", rank="1", **job) == 1.0
    assert value(found, "gputop_rank_cpu_ratio", rank="1", **job) == 1.0
    assert value(found, "gputop_rank_last_progress_age_seconds", rank="0", **job) == 0.4
    # The job's verdict is composed from its ranks': its last progress is the most recent any rank made.
    assert value(found, "gputop_last_progress_age_seconds", pid="500", **job) == 0.2
    # The info series names the straggler's frame, with its rank: the library frame and the user's caller.
    assert value(found, "gputop_responsible_frame_info", rank="1", pid="502", function="Linear.forward",
                 file="torch/nn/modules/linear.py", called_from="GPT.forward (model.py:180)", **job) == 1.0
    assert len([n for n, _ in found if n == "gputop_responsible_frame_info"]) == 1
    assert value(found, "gputop_cpu_quota_cpus", pid="500", **job) == 4.0
    assert value(found, "gputop_cpu_throttled_ratio", pid="500", **job) == 0.3
    assert value(found, "gputop_cpu_throttled_seconds_total", pid="500", **job) == 12.5
    assert value(found, "gputop_monitor_cpu_ratio", pid="500", **job) == pytest.approx(0.03)
    assert value(found, "gputop_sampler_cpu_ratio", pid="500", **job) == pytest.approx(0.12)
    assert value(found, "gputop_gpu_clock_event_reason", gputop_gpu_clock_event_reason="sw_power_cap",
                 uuid="GPU-1aaa") == 1.0
    assert value(found, "gputop_gpu_clock_event_reason", gputop_gpu_clock_event_reason="hw_slowdown",
                 uuid="GPU-1aaa") == 0.0
    assert value(found, "gputop_gpu_tensor_active_ratio", uuid="GPU-0aaa") == pytest.approx(0.4)
    assert value(found, "gputop_gpu_dram_bandwidth_ratio", uuid="GPU-0aaa") == pytest.approx(0.3)


def test_job_label_is_the_run_id_else_the_launcher_else_the_pid():
    assert training_job_label(job_view("run-42").latest) == "run-42"
    assert training_job_label(job_view("none").latest) == "torchrun-500"  # torchrun's default, not a name
    assert training_job_label(job_view(None).latest) == "torchrun-500"
    assert training_job_label(make_frame(0)) == f"pid-{PID}"


def test_job_id_is_what_every_node_agrees_on_slurms_job_else_the_run_id_else_none():
    assert job_id_label(job_view("run-42", slurm_job="4242.0").latest) == "4242.0"
    assert job_id_label(job_view("run-42").latest) == "run-42"
    assert job_id_label(job_view("none").latest) == "", "torchrun's default run id names no job"
    assert job_id_label(job_view(None).latest) == ""
    assert job_id_label(make_frame(0)) == ""
    # On the rank series, the finding and the responsible frame; the target's own series keep their labels.
    found = samples(exposition(WatchedView(job_view("none", slurm_job="4242.0"))))
    job = {"host": "node1", "training_job": "torchrun-500", "job_id": "4242.0"}
    assert value(found, "gputop_rank_collective_wait_ratio", rank="1", pid="502", **job) == 0.05
    assert value(found, "gputop_rank_responsible", rank="1", **job) == 1.0
    assert value(found, "gputop_job_finding", gputop_job_finding="straggler", **job) == 1.0
    assert value(found, "gputop_responsible_frame_info", rank="1", function="Linear.forward", **job) == 1.0
    assert "job_id" not in dict(next(ls for (n, ls) in found if n == "gputop_liveness"))


def test_a_gpu_seen_by_two_targets_is_exposed_once():
    text = exposition(WatchedView(job_view("run-1")), WatchedView(job_view("run-2")))
    clocks = [s for s in samples(text) if s[0] == "gputop_gpu_sm_clock_hertz"]
    assert len(clocks) == 2  # two devices, not four


def test_series_follow_the_published_views_no_stale_ones():
    published = [WatchedView(seed_case_view()), WatchedView(job_view())]
    registry = CollectorRegistry()
    registry.register(GputopCollector(lambda: tuple(published), host="node1"))
    before = generate_latest(registry).decode()
    assert 'training_job="run-42"' in before and f'training_job="pid-{PID}"' in before
    del published[1]  # the job ended and was dropped
    after = generate_latest(registry).decode()
    assert 'training_job="run-42"' not in after and "gputop_rank_" not in after
    assert f'training_job="pid-{PID}"' in after
    published.clear()
    assert samples(generate_latest(registry).decode()) == {
        ("gputop_watched_targets", frozenset({("host", "node1")})): 0.0}


def test_no_timestamps_and_build_metrics_is_pure():
    views = [WatchedView(seed_case_view()), WatchedView(job_view())]
    first, second = build_metrics(views, "node1"), build_metrics(views, "node1")
    assert [(m.name, m.samples) for m in first] == [(m.name, m.samples) for m in second]
    assert all(s.timestamp is None for m in first for s in m.samples)


def test_endpoint_speaks_prometheus_text_and_openmetrics_when_asked():
    registry = CollectorRegistry()
    registry.register(GputopCollector(lambda: (WatchedView(job_view()),), host="node1"))
    httpd, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            plain = response.read().decode()
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        request = urllib.request.Request(url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        with urllib.request.urlopen(request, timeout=10) as response:
            openmetrics = response.read().decode()
            assert response.headers["Content-Type"].startswith("application/openmetrics-text")
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
    assert "# TYPE gputop_bottleneck gauge" in plain
    assert "# TYPE gputop_bottleneck stateset" in openmetrics and openmetrics.rstrip().endswith("# EOF")
    assert "# TYPE gputop_responsible_frame info" in openmetrics
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

    types = {family.name: family.type for family in parse_openmetrics(openmetrics)}  # raises on a malformed one
    assert types["gputop_rank_liveness"] == "stateset" and types["gputop_cpu_throttled_seconds"] == "counter"


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:9407", ("127.0.0.1", 9407)),
    ("9500", ("127.0.0.1", 9500)),
    (":9407", ("0.0.0.0", 9407)),
    ("0.0.0.0:8000", ("0.0.0.0", 8000)),
    ("[::1]:9407", ("::1", 9407)),
])
def test_listen_addresses(text, expected):
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["localhost", "127.0.0.1:http", "1.2.3.4:70000", "[::1]9407"])
def test_bad_listen_addresses_say_what_to_write(text):
    with pytest.raises(ListenError, match="--listen"):
        parse_listen(text)


# --- follow mode's rules, on constructed process tables ------------------------------------------------------


@pytest.mark.parametrize("name, cmdline, launcher", [
    ("python3", ("/usr/bin/python3", "-m", "torch.distributed.run", "--nproc_per_node", "2", "train.py"), True),
    ("torchrun", ("/venv/bin/python", "/venv/bin/torchrun", "--standalone", "train.py"), True),
    ("torchrun", ("/venv/bin/torchrun", "train.py"), True),
    ("python", ("python", "-m", "torch.distributed.launch", "train.py"), True),
    ("vim", ("vim", "torchrun"), False),  # naming torchrun is not running it
    ("python", ("python", "train.py"), False),
])
def test_launchers_are_recognised_by_their_command_line(name, cmdline, launcher):
    assert (launcher_of_process(name, cmdline) is not None) is launcher


PYTHON_TRAIN = ("python", "train.py")


def test_multiprocessing_children_are_followed_up_to_their_starter():
    procs = {
        10: NodeProcess(10, 1, "bash", ("bash",)),
        20: NodeProcess(20, 10, "python", PYTHON_TRAIN),  # the training script
        21: NodeProcess(21, 20, "python", ("python", "-c", "from multiprocessing.spawn import spawn_main; "
                                           "spawn_main(tracker_fd=5, pipe_handle=7)", "--multiprocessing-fork")),
        22: NodeProcess(22, 20, "pt_data_worker", PYTHON_TRAIN),  # forked: same command line
        23: NodeProcess(23, 20, "python", ("python", "other.py")),  # started with subprocess: its own job
    }
    assert _top(21, procs) == 20 and _top(22, procs) == 20
    assert _top(23, procs) == 23 and _top(20, procs) == 20


def test_census_on_a_constructed_table_one_job_per_launcher_or_gpu_holder():
    # PIDs far above any real one: resolve_root and the environment reads find nothing there, as for a
    # process that has ended; the census still decides from the table.
    base = 4_000_000_000
    launcher, rank0, rank1, worker, lone, its_worker, shell = (base + i for i in range(7))
    procs = {
        shell: NodeProcess(shell, 1, "bash", ("bash",)),
        launcher: NodeProcess(launcher, shell, "python", ("python", "-m", "torch.distributed.run", "job.py")),
        rank0: NodeProcess(rank0, launcher, "python", ("python", "-u", "job.py")),
        rank1: NodeProcess(rank1, launcher, "python", ("python", "-u", "job.py")),
        worker: NodeProcess(worker, rank0, "pt_data_worker", ("python", "-u", "job.py")),
        lone: NodeProcess(lone, shell, "python", ("python", "infer.py")),
        its_worker: NodeProcess(its_worker, lone, "pt_data_worker", ("python", "infer.py")),
    }
    found = find_training_jobs(gpu_pids=[rank0, rank1, its_worker, shell], procs=procs)
    assert [(j.root_pid, j.why) for j in found] == [
        (launcher, "torchrun launcher"), (lone, f"PID {its_worker} holds a GPU context")]
    assert find_training_jobs(gpu_pids=[lone], procs=procs, exclude=[lone, launcher]) == []


class _FakeEngine:
    """Hands out prepared frames, as Engine.tick would."""

    def __init__(self, frames):
        self.frames, self.closed = list(frames), False

    def tick(self):
        return self.frames.pop(0)

    def close(self):
        self.closed = True


def test_follow_drops_a_target_once_it_has_ended_and_keeps_the_others():
    from probes.monitoring.engine import EngineConfig

    server = Server(EngineConfig(read_gpu=False, sample_stacks=False), pid=None, follow=True, hang_after_s=5.0,
                    log=lambda line: None)
    from probes.monitoring.node_watch import WatchedTarget

    ended = _FakeEngine([make_frame(0, cpu=50.0), make_frame(1, alive=False)])
    running = _FakeEngine([make_frame(0, processes=[proc(pid=77)]), make_frame(1, processes=[proc(pid=77)])])
    server.node.watched = {PID: WatchedTarget(ended, "test"), 77: WatchedTarget(running, "test")}
    server.node._last_scan = float("inf")  # no scan of this machine between the two ticks
    server.step()
    assert len(server.views()) == 2
    server.step()
    assert len(server.views()) == 1 and ended.closed and not running.closed
    assert PID not in server.node.watched and PID not in server._monitors
    assert server.views()[0].view.latest.process(77) is not None


def exported_names() -> set[str]:
    """Every sample name the collector can produce, from views that fill every reading."""
    text = exposition(WatchedView(seed_case_view(), mfu_floor=0.3), WatchedView(deadlock_view()),
                      WatchedView(job_view()))
    return {name for name, _ in samples(text)}


def test_every_metric_the_rules_and_the_dashboard_name_is_exported():
    import json
    import re

    names = exported_names() | {"gputop_reference_rate_ratio"}  # needs --baseline: the H200 recording's test has it
    # Every GPM row is exported (tests/unit/test_gpu_metrics.py); the fixtures' readings hold only some of them.
    names |= {metric.prometheus_name for metric in GPM_METRICS}
    dashboard = json.loads((REPO / "deploy" / "grafana" / "gputop-job.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]  # a row has none
    rules = (RULES / "gputop-rules.yml").read_text()
    docs = (REPO / "docs" / "exporter.md").read_text()
    for where, text in (("dashboard", "\n".join(exprs)), ("rules", rules), ("docs", docs)):
        used = set(re.findall(r"\bgputop_[a-z0-9_]+", text)) - {"gputop_rules", "gputop_job"}  # fp16: digits
        assert used and used <= names, (where, sorted(used - names))
    # The recording rules' names the dashboard and the docs use are the rules' own.
    recorded = set(re.findall(r"record: (gputop:[a-z_:]+)", rules))
    assert {"gputop:job_straggler_rank", "gputop:job_collective_wait_ratio:median"} <= recorded
    for where, text in (("dashboard", "\n".join(exprs)), ("docs", docs)):
        used = set(re.findall(r"\bgputop:[a-z_:]*[a-z]", text))
        assert used <= recorded, (where, sorted(used - recorded))


def test_a_deadlocked_rank_folded_by_the_monitor_reads_as_a_hung_job_with_its_culprit():
    """The real fold (Monitor → diagnose_job) on a torchrun job whose rank 1 deadlocks in flush_metrics while
    rank 0 waits for it in all_reduce: the job is hung, rank 1 is the one to blame, and where."""
    from support.job_frames import ALL_REDUCE, FLUSH_METRICS, LAUNCHER, RANK0, RANK1, count, job_frame, rank_proc

    from probes.frame import ThreadStack as Thread

    training = [job_frame(i, [rank_proc(RANK0, 0), rank_proc(RANK1, 1)], counts=[
        count(RANK0, FORWARD, n=5), count(RANK1, FORWARD, n=5)]) for i in range(4)]
    stuck = [job_frame(i, [rank_proc(RANK0, 0, cpu=1.0, main_cpu=0.0), rank_proc(RANK1, 1, cpu=0.0, main_cpu=0.0)],
                       counts=[count(RANK0, ALL_REDUCE, n=5, idle=True), count(RANK1, FLUSH_METRICS, n=5, idle=True)],
                       threads=[Thread(pid=RANK0, tid=RANK0, name="MainThread", idle=True, frames=ALL_REDUCE),
                                Thread(pid=RANK1, tid=RANK1, name="MainThread", idle=True, frames=FLUSH_METRICS)])
             for i in range(4, 16)]
    view = fold(training + stuck, hang_after_s=5.0, replay=False).view
    assert view.job is not None and view.job.finding == "hung_rank"
    found = samples(exposition(WatchedView(view)))
    job = {"host": "node1", "training_job": "run-7"}
    assert value(found, "gputop_liveness", gputop_liveness="hung", pid=str(LAUNCHER), **job) == 1.0
    assert value(found, "gputop_last_progress_age_seconds", pid=str(LAUNCHER), **job) >= 5.0
    assert value(found, "gputop_job_finding", gputop_job_finding="hung_rank", **job) == 1.0
    assert value(found, "gputop_rank_responsible", rank="1", pid=str(RANK1), **job) == 1.0
    assert value(found, "gputop_rank_responsible", rank="0", pid=str(RANK0), **job) == 0.0
    assert value(found, "gputop_rank_liveness", gputop_rank_liveness="hung", rank="1", **job) == 1.0
    assert value(found, "gputop_rank_last_progress_age_seconds", rank="1", **job) >= 5.0
    assert value(found, "gputop_responsible_frame_info", rank="1", pid=str(RANK1), function="flush_metrics",
                 file="train.py", line="12", **job) == 1.0
    assert value(found, "gputop_rank_collective_wait_ratio", rank="0", **job) > \
        (value(found, "gputop_rank_collective_wait_ratio", rank="1", **job) or 0.0)


def test_without_a_rank_to_blame_the_frame_is_the_first_ranks_with_its_rank():
    view = job_view()
    shared = dataclasses.replace(view.job, finding="shared", responsible_rank=None)
    frame = view.latest
    threads = (ThreadStack(pid=501, tid=501, name="MainThread", frames=FORWARD),)
    frame = dataclasses.replace(frame, stacks=dataclasses.replace(frame.stacks, threads=threads))
    found = samples(exposition(WatchedView(MonitorView(frames=(frame,), verdict=shared.verdict, job=shared))))
    assert value(found, "gputop_responsible_frame_info", rank="0", pid="501", function="Linear.forward") == 1.0
    assert value(found, "gputop_rank_responsible", rank="0") == 0.0  # named for where it is, not blamed
