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
import socket
import subprocess
import sys
import threading
import urllib.parse
import urllib.request

import psutil
import pytest
from conftest import REPO, wait_for
from test_diagnose_e2e import start

pytestmark = pytest.mark.slow

needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="prometheus/promtool not installed (apt-get install prometheus; .ci/run does it as root)")
SERVING = re.compile(r"serving /metrics on (http://\S+/metrics)")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Served:
    """A running `gputop serve`: its URL, and its stderr as it comes."""

    def __init__(self, *args: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO))
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

    def run(*args: str) -> Served:
        served = Served(*args)
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


@pytest.fixture
def prometheus(tmp_path):
    """prometheus(metrics_url) -> Prometheus scraping it every second; stopped after the test."""
    started: list[subprocess.Popen] = []

    def run(metrics_url: str) -> Prometheus:
        parsed = urllib.parse.urlparse(metrics_url)
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: gputop\n    static_configs:\n"
            f"      - targets: ['{parsed.netloc}']\n")
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
    target = start(spawn_target, tmp_path, "diag_deadlock.py")
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
    target = start(spawn_target, tmp_path, "diag_dataloader.py")
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
