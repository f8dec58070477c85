"""`gputop serve` end to end: real targets, the real command, a real Prometheus server scraping it.

Prometheus (Debian's `prometheus` package) runs from the test with its own config and a temporary TSDB on a
free port; the test asks its HTTP API what it scraped, as a dashboard or an alert would. `promtool check
metrics` checks what the live endpoint serves. Follow mode is checked on a real torchrun job (gloo, CPU): its
series appear once it starts and are gone once it ends.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import urllib.parse
import urllib.request

import psutil
import pytest
from support.paths import REPO
from support.processes import free_port, said_ready, start_logged, wait_for

pytestmark = pytest.mark.slow

needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="prometheus/promtool not installed (apt-get install prometheus; .ci/run does it as root)")
SERVING = re.compile(r"serving /metrics on (http://\S+/metrics)")


class Served:
    """A running `gputop serve`: its URL, and its stderr as it comes."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
        self.proc = subprocess.Popen([sys.executable, "-m", "tui", "serve", "--listen", "127.0.0.1:0", *args],
                                     cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        found = wait_for(lambda: self.proc.poll() is not None or next(
            (m.group(1) for m in map(SERVING.search, self.lines) if m), None), timeout=60)
        assert self.proc.poll() is None, "gputop serve exited:\n" + "".join(self.lines)
        self.url = found

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url, timeout=10) as response:
            return response.read().decode()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._reader.join(timeout=5)


@pytest.fixture
def serve():
    started: list[Served] = []

    def run(*args: str, env: dict[str, str] | None = None) -> Served:
        served = Served(*args, env=env)
        started.append(served)
        return served

    yield run
    for served in started:
        served.stop()
        assert served.proc.returncode == 0, "".join(served.lines)


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, promql: str) -> list[dict]:
        query = urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{query}", timeout=10) as response:
            answer = json.load(response)
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def alerts(self) -> list[dict]:
        """The alerts Prometheus holds now, pending ones included, with their annotations."""
        with urllib.request.urlopen(f"{self.url}/api/v1/alerts", timeout=10) as response:
            answer = json.load(response)
        assert answer["status"] == "success", answer
        return answer["data"]["alerts"]


@pytest.fixture
def prometheus(tmp_path):
    """prometheus(metrics_url, ..., rule_files=[...]) -> Prometheus scraping them every second, evaluating the
    rules every second; stopped after the test."""
    started: list[subprocess.Popen] = []

    def run(*metrics_urls: str, rule_files: tuple[str, ...] = ()) -> Prometheus:
        targets = ", ".join(f"'{urllib.parse.urlparse(url).netloc}'" for url in metrics_urls)
        config = tmp_path / "prometheus.yml"
        rules = "rule_files:\n" + "".join(f"  - {path}\n" for path in rule_files) if rule_files else ""
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n" + rules +
            "scrape_configs:\n  - job_name: gputop\n    static_configs:\n"
            f"      - targets: [{targets}]\n")
        port = free_port()
        log = (tmp_path / "prometheus.log").open("w")
        proc = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        log.close()
        started.append(proc)
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
                    return response.status == 200
            except OSError:
                return False

        wait_for(ready, timeout=60, interval=0.3)
        return Prometheus(url)

    yield run
    for proc in started:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def promtool_check(exposition: str) -> None:
    result = subprocess.run(["promtool", "check", "metrics"], input=exposition, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_prometheus
def test_prometheus_sees_the_deadlocked_target_hung_and_where(spawn_target, tmp_path, serve, prometheus):
    target = start_logged(spawn_target, tmp_path, "diag_deadlock.py")
    served = serve("--pid", str(target.pid), "--no-gpu", "--hang-after", "5")
    server = prometheus(served.url)
    hung = f'gputop_liveness{{gputop_liveness="hung",pid="{target.pid}"}} == 1'
    result = wait_for(lambda: server.query(hung), timeout=120, interval=1.0)
    assert result[0]["metric"]["training_job"] == f"pid-{target.pid}"
    assert result[0]["metric"]["job"] == "gputop"  # Prometheus's own scrape job label, untouched by ours
    silence = server.query(f'gputop_last_progress_age_seconds{{pid="{target.pid}"}}')
    assert float(silence[0]["value"][1]) >= 5.0
    where = wait_for(lambda: server.query(f'gputop_responsible_frame_info{{pid="{target.pid}"}}'), timeout=30)
    assert where[0]["metric"]["function"] == "rotate_logs" and where[0]["metric"]["file"] == "diag_deadlock.py"
    exposition = served.metrics()
    promtool_check(exposition)
    assert "process_cpu_seconds_total" in exposition  # gputop's own CPU


@needs_prometheus
def test_prometheus_sees_the_dataloader_starved_target_data_bound(spawn_target, tmp_path, serve, prometheus):
    target = start_logged(spawn_target, tmp_path, "diag_dataloader.py")
    served = serve("--pid", str(target.pid), "--no-gpu")
    server = prometheus(served.url)
    data_bound = f'gputop_bottleneck{{gputop_bottleneck="data_bound",pid="{target.pid}"}} == 1'
    wait_for(lambda: server.query(data_bound), timeout=120, interval=1.0)
    assert server.query(f'gputop_liveness{{gputop_liveness="progressing",pid="{target.pid}"}} == 1')
    # One state at a time: the state set sums to 1.
    total = server.query(f'sum(gputop_bottleneck{{pid="{target.pid}"}})')
    assert float(total[0]["value"][1]) == 1.0
    promtool_check(served.metrics())


def series_of(run_id: str, exposition: str) -> list[str]:
    return [line for line in exposition.splitlines()
            if not line.startswith("#") and f'training_job="{run_id}"' in line]


def test_follow_picks_up_a_torchrun_job_with_its_ranks_and_drops_it_when_it_ends(spawn_target, tmp_path, serve):
    served = serve("--follow", "--no-gpu", "--interval", "0.5")
    stop_file, out = tmp_path / "stop", tmp_path / "job.out"
    run_id = f"exporter-e2e-{os.getpid()}"  # torchrun's --rdzv-id: the job's name on every node
    with out.open("w") as handle:
        launcher = spawn_target(
            "exporter_torchrun.py", "--nproc_per_node", "2", "--master_port", str(free_port()), "--rdzv-id", run_id,
            str(REPO / "tests" / "targets" / "exporter_ddp_job.py"), str(stop_file),
            stdout=handle, stderr=subprocess.STDOUT, timeout=120,
            ready=lambda proc: out.read_text().count(" ready") >= 2)

    def both_ranks() -> list[str] | None:
        lines = series_of(run_id, served.metrics())
        ranks = {re.search(r'rank="(\d+)"', line).group(1) for line in lines
                 if line.startswith("gputop_rank_liveness{")}
        return lines if ranks == {"0", "1"} else None

    found = wait_for(both_ranks, timeout=60, interval=0.5)
    assert any(line.startswith("gputop_liveness{") and f'pid="{launcher.pid}"' in line for line in found), found
    rank_pids = {int(p) for p in re.findall(r'gputop_rank_liveness\{[^}]*pid="(\d+)"', "\n".join(found))}
    assert rank_pids == {child.pid for child in psutil.Process(launcher.pid).children()}
    assert any(f"following PID {launcher.pid} (torchrun launcher)" in line for line in served.lines), served.lines
    stop_file.touch()
    wait_for(lambda: launcher.poll() is not None, timeout=60)
    assert launcher.returncode == 0, out.read_text()[-2000:]
    wait_for(lambda: not series_of(run_id, served.metrics()), timeout=30, interval=0.5)
    assert any(f"stopped following PID {launcher.pid}" in line for line in served.lines), served.lines


def test_follow_census_finds_a_rank_and_a_gpu_holder_on_the_real_process_table(spawn_target):
    ranked = spawn_target("busy_loop.py", ready=lambda proc: True, env={"RANK": "3", "LOCAL_RANK": "1"})
    plain = spawn_target("busy_loop.py", ready=lambda proc: True)
    gpu_user = spawn_target("busy_loop.py", ready=lambda proc: True)

    def census() -> dict[int, str] | None:
        # From a process of its own, as gputop serve runs it: what the census's caller started is never a job,
        # and these targets are children of this test's process.
        code = (f"import json; from probes.jobs.follow import find_training_jobs; print(json.dumps("
                f"{{j.root_pid: j.why for j in find_training_jobs(gpu_pids=[{gpu_user.pid}])}}))")
        result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        jobs = {int(pid): why for pid, why in json.loads(result.stdout).items()}
        return jobs if ranked.pid in jobs and gpu_user.pid in jobs else None

    jobs = wait_for(census, timeout=20)
    assert jobs[ranked.pid] == "RANK=3 in its environment"
    assert jobs[gpu_user.pid] == f"PID {gpu_user.pid} holds a GPU context"
    assert plain.pid not in jobs and os.getpid() not in jobs
    # What the caller started is not a job: asked from this process, its own children are left out.
    from probes.jobs.follow import find_training_jobs

    assert not {job.root_pid for job in find_training_jobs(gpu_pids=[gpu_user.pid])} & {ranked.pid, gpu_user.pid}


@needs_prometheus
@pytest.mark.timeout(600)
def test_prometheus_names_the_straggler_rank_and_its_host_across_two_serve_instances(spawn_target, tmp_path, serve,
                                                                                       prometheus):
    """A real 4-rank gloo job over two "nodes" as `srun torchrun` runs it (each node's torchrun a task of Slurm
    job step 4242.0, --nnodes 2, two ranks each, rank 3 slow in slow_augment), one `gputop serve --pid
    <launcher>` per node (SLURMD_NODENAME n1 / n2), a real Prometheus scraping both with the shipped rules: the
    recording rule and the alert name rank 3 on n2. The nodes' training_job differ (no --rdzv-id: each launcher's
    PID); job_id joins them."""
    job_id = f"{os.getpid()}.0"
    port, outs, launchers = str(free_port()), [tmp_path / f"node{k}.out" for k in (0, 1)], []
    for k, out in enumerate(outs):
        slurm = {"SLURM_JOB_ID": str(os.getpid()), "SLURM_STEP_ID": "0", "SLURM_PROCID": str(k),
                 "SLURMD_NODENAME": f"n{k + 1}"}
        with out.open("w") as handle:
            launchers.append(spawn_target("ddp_job.py", "straggler", "--launch-node", str(k), "--nnodes", "2",
                                          "--master-port", port, "--slow-rank", "3", env=slurm, stdout=handle,
                                          stderr=subprocess.STDOUT))
    wait_for(lambda: said_ready(outs[0].read_text()) or any(p.poll() is not None for p in launchers), timeout=180,
             interval=0.5)
    assert all(p.poll() is None for p in launchers), [o.read_text()[-2000:] for o in outs]
    nodes = [serve("--pid", str(launcher.pid), "--no-gpu", "--hang-after", "30", env={"SLURMD_NODENAME": f"n{k + 1}"})
             for k, launcher in enumerate(launchers)]
    server = prometheus(*(node.url for node in nodes),
                        rule_files=(str(REPO / "deploy" / "prometheus" / "gputop-rules.yml"),))

    # Both instances' ranks under the one job id, each node with its own training_job.
    def every_rank() -> dict[str, set[str]] | None:
        found = server.query(f'gputop_rank_collective_wait_ratio{{job_id="{job_id}"}}')
        by_host: dict[str, set[str]] = {}
        for series in found:
            by_host.setdefault(series["metric"]["host"], set()).add(series["metric"]["rank"])
        return found if by_host == {"n1": {"0", "1"}, "n2": {"2", "3"}} else None

    ranks = wait_for(every_rank, timeout=180, interval=1.0)
    training_jobs = {s["metric"]["host"]: s["metric"]["training_job"] for s in ranks}
    assert training_jobs == {"n1": f"torchrun-{launchers[0].pid}", "n2": f"torchrun-{launchers[1].pid}"}

    def straggler() -> dict | None:
        found = server.query(f'gputop:job_straggler_rank{{job_id="{job_id}"}}')
        return found[0] if [(s["metric"]["rank"], s["metric"]["host"]) for s in found] == [("3", "n2")] else None

    named = wait_for(straggler, timeout=240, interval=1.0)
    rank3 = next(c.pid for c in psutil.Process(launchers[1].pid).children() if c.environ().get("RANK") == "3")
    assert named["metric"]["pid"] == str(rank3)

    def alerting() -> dict | None:
        return next((a for a in server.alerts() if a["labels"]["alertname"] == "GputopStragglerAcrossNodes"
                     and a["labels"].get("job_id") == job_id), None)

    alert = wait_for(alerting, timeout=60, interval=1.0)
    waits = {s["metric"]["rank"]: round(float(s["value"][1]), 3)
             for s in server.query(f'gputop_rank_collective_wait_ratio{{job_id="{job_id}"}}')}
    print(f"\ngputop:job_straggler_rank: {named['metric']} = {named['value'][1]}; waits by rank: {waits}; "
          f"alert {alert['state']}: {alert['annotations']['summary']}")
    assert (alert["labels"]["rank"], alert["labels"]["host"], alert["state"]) == ("3", "n2", "pending")  # for: 10m
    assert alert["annotations"]["summary"] == f"rank 3 on n2 holds job {job_id} back"
    for launcher in launchers:
        assert launcher.poll() is None  # serving never touched the job
