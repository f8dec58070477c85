"""Slurm jobs end to end on the real test cluster (tests/support/slurm_cluster.py): 2-task gloo jobs of
tests/targets/slurm_ddp_job.py started by `srun` and by `sbatch`, watched by the real command
(`python -m tui --pid PID | --slurm-job JOB --snapshot OUT --record REC`) until the job verdict reaches the
expected state (never a fixed wait), as tests/e2e/test_job_e2e.py does for torchrun.

The tasks carry only Slurm's variables (SLURM_PROCID, SLURM_NTASKS, ...) and MASTER_ADDR/PORT, as a job script
exports them: gputop must find the job, its ranks and the straggler or stuck task from those.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.jobwatch import TIMEOUT_S, settled, watch_job_until
from support.paths import REPO, TARGETS
from support.processes import free_port, said_ready, stop_process_tree, wait_for
from support.slurm_cluster import list_pids

from probes.sensors.slurm import SlurmError, SlurmStep, show_steps

# Each test waits for its job to start and for its verdict, each wait bounded by TIMEOUT_S: pytest's own
# limit must cover both on a busy 2-core machine, or it cuts a slow but passing run short.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * TIMEOUT_S + 60)]


def job_env(cluster) -> dict[str, str]:
    """What the job script exports: the rendezvous address, and this checkout on the path; no RANK."""
    return dict(cluster.env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), PYTHONPATH=str(REPO),
                PYTHONUNBUFFERED="1")


def tasks_of(step: SlurmStep) -> dict[int, int]:
    """{global task id: PID} of a step's tasks on this node."""
    listed = list_pids(step)
    return {} if isinstance(listed, SlurmError) else {p.global_id: p.pid for p in listed if p.global_id is not None}


class SrunJob:
    def __init__(self, cluster, tmp_path: Path, mode: str) -> None:
        self.cluster = cluster
        self.out = tmp_path / f"srun-{mode}.out"
        with self.out.open("w") as handle:
            self.srun = subprocess.Popen(
                ["srun", "-n", "2", "-J", f"ddp-{mode}", sys.executable, str(TARGETS / "slurm_ddp_job.py"), mode],
                env=job_env(cluster), start_new_session=True, stdout=handle, stderr=subprocess.STDOUT)
        self.step: SlurmStep | None = None

    def wait_ready(self) -> None:
        def started():
            steps = show_steps()
            if self.srun.poll() is not None:
                pytest.fail(f"srun exited with {self.srun.returncode}: {self.out.read_text()}")
            return None if isinstance(steps, SlurmError) else next(
                (s.step for s in steps if s.srun_pid == self.srun.pid), None)

        self.step = wait_for(started, timeout=TIMEOUT_S)
        wait_for(lambda: said_ready(self.out.read_text()), timeout=TIMEOUT_S)

    def stop(self) -> None:
        stop_process_tree(self.srun)
        if self.step is not None:
            self.cluster.cancel(self.step.job_id)


@pytest.fixture
def slurm_env(slurm_cluster, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))  # probes/slurm's scontrol, in this process too
    return slurm_cluster


@pytest.fixture
def srun_job(slurm_env, tmp_path):
    jobs = []

    def start(mode: str) -> SrunJob:
        job = SrunJob(slurm_env, tmp_path, mode)
        jobs.append(job)
        job.wait_ready()
        return job

    yield start
    for job in jobs:
        job.stop()


def straggler_named(job) -> bool:
    return job.finding == "straggler" and job.responsible_rank == 1 and settled(job)


def assert_straggler(document, jobs, step: SlurmStep) -> None:
    job = document["job"]
    assert (job["kind"], job["slurm_step"], job["world_size"]) == ("slurm", str(step), 2), job
    assert (job["finding"], job["responsible_rank"]) == ("straggler", 1), document["verdict"]
    headline = document["verdict"]["evidence"][0]
    assert headline.startswith("rank 1 is the straggler: ") and "slow_augment (ddp_job.py:" in headline, headline
    assert [r["rank"] for r in job["ranks"]] == [0, 1]
    assert not any(j is not None and j.verdict.liveness == "hung" for j in jobs), "a false hung on a healthy job"


@pytest.mark.timeout(4 * TIMEOUT_S + 60)  # the job's start, then three attachments, each bounded
def test_srun_straggler_attached_to_srun_to_task_0_and_by_slurm_job(srun_job, tmp_path):
    job = srun_job("straggler")
    env = job.cluster.env
    document, _, jobs, said = watch_job_until(["--pid", str(job.srun.pid)], tmp_path, straggler_named, env=env)
    assert_straggler(document, jobs, job.step)
    assert f"attached to srun (PID {job.srun.pid}): watching Slurm step {job.step}: 2 tasks" in said, said

    task0 = tasks_of(job.step)[0]
    document, _, jobs, said = watch_job_until(["--pid", str(task0)], tmp_path, straggler_named, env=env)
    assert_straggler(document, jobs, job.step)
    assert f"attached to task 0 (PID {task0})" in said, said

    document, _, jobs, said = watch_job_until(["--slurm-job", job.step.job_id], tmp_path, straggler_named, env=env)
    assert_straggler(document, jobs, job.step)


def test_a_hung_task_is_named_attached_to_a_task(srun_job, tmp_path):
    job = srun_job("deadlock")
    task0 = tasks_of(job.step)[0]
    document, _, _, _ = watch_job_until(
        task0, tmp_path, lambda j: j.finding == "hung_rank" and j.verdict.liveness == "hung", env=job.cluster.env)
    assert (document["job"]["kind"], document["job"]["responsible_rank"]) == ("slurm", 1), document["verdict"]
    headline = document["verdict"]["evidence"][0]
    assert headline.startswith("rank 1 stuck in flush_metrics (ddp_job.py:"), headline
    assert headline.endswith("rank 0 waits for it in all_reduce"), headline


def test_sbatch_straggler_attached_to_the_batch_script(slurm_env, tmp_path):
    out = tmp_path / "sbatch.out"
    script = tmp_path / "train.sbatch"
    script.write_text("#!/bin/bash\n"
                      f"srun {sys.executable} {TARGETS / 'slurm_ddp_job.py'} straggler\n")
    submitted = subprocess.run(["sbatch", "--parsable", "-n", "2", "-J", "ddp-batch", "-o", str(out), str(script)],
                               env=job_env(slurm_env), capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    try:
        wait_for(lambda: out.exists() and said_ready(out.read_text()), timeout=TIMEOUT_S)
        listed = list_pids(SlurmStep(job_id))  # scontrol lists a job's steps, not a batch step alone
        assert not isinstance(listed, SlurmError), listed
        shell = next(p.pid for p in listed if p.step.step == "batch" and "slurm_script" in " ".join(_cmdline(p.pid)))
        document, _, jobs, said = watch_job_until(["--pid", str(shell)], tmp_path, straggler_named, env=slurm_env.env)
        assert_straggler(document, jobs, SlurmStep(job_id, "0"))
        assert f"attached to slurm_script (PID {shell}): watching Slurm step {job_id}.0" in said, said
    finally:
        slurm_env.cancel(job_id)


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except OSError:
        return []


@pytest.mark.timeout(3 * TIMEOUT_S + 60)  # the job's start, the agents' start through srun, the verdict
def test_across_nodes_starts_the_agents_through_srun_and_lists_each_rank_with_its_node(srun_job, tmp_path):
    """`gputop --slurm-job J --across-nodes`: the merge path a login node takes, forced on a node of the job, so
    the agent really starts as a step of the job (`srun --jobid J --overlap`) and its frames come back merged."""
    import json
    import os
    import signal

    from probes.monitoring.cluster import ClusterMonitor
    from probes.outputs.recording import read_recording

    job = srun_job("straggler")
    record, snapshot = tmp_path / "across.jsonl", tmp_path / "across.json"
    merge = subprocess.Popen(
        [sys.executable, "-m", "tui", "--slurm-job", job.step.job_id, "--across-nodes", "--record", str(record),
         "--snapshot", str(snapshot), "--duration", str(3 * TIMEOUT_S)],
        cwd=REPO, env={**os.environ, **job.cluster.env, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE, text=True,
        start_new_session=True)

    seen = []

    def merged():
        assert merge.poll() is None, merge.stderr.read()
        monitor = ClusterMonitor(replay=True)
        if record.exists() and record.stat().st_size:
            for frame in read_recording(record):
                monitor.ingest(frame)
        found = monitor.view.job if monitor.view is not None else None
        seen[:] = [found.verdict.evidence[:1] if found is not None else None,
                   [(r.rank, r.node) for r in found.ranks] if found is not None else None]
        return found if found is not None and len(found.ranks) == 2 and straggler_named(found) else None

    try:
        try:
            found = wait_for(merged, timeout=TIMEOUT_S, interval=2.0)
        except BaseException:
            merge.send_signal(signal.SIGTERM)
            pytest.fail(f"last merged view: {seen}; the merge said: {merge.communicate(timeout=60)[1]}")
        agent_steps = [s for s in show_steps(SlurmStep(job.step.job_id)) if s.name == "gputop-agent"]
        assert agent_steps, "the agent did not run as a step of the job"
        merge.send_signal(signal.SIGTERM)
        _, stderr = merge.communicate(timeout=60)
    finally:
        if merge.poll() is None:
            stop_process_tree(merge)
    assert merge.returncode == 0, stderr
    node = found.ranks[0].node
    assert node and all(r.node == node for r in found.ranks)
    assert found.verdict.evidence[0].startswith(f"rank 1 on {node} is the straggler: "), found.verdict.evidence
    document = json.loads(snapshot.read_text())
    assert [(r["rank"], r["node"]) for r in document["job"]["ranks"]] == [(0, node), (1, node)]
    assert [(n["name"], n["state"]) for n in document["nodes"]] == [(node, "live")]
    assert f"starting an agent on 1 node ({node})" in stderr, stderr


@pytest.mark.timeout(4 * TIMEOUT_S + 60)  # the job's start, the first merge's agent, the second's verdict
def test_a_second_merge_of_the_same_job_never_takes_the_first_merges_agent_step_for_the_job(srun_job, tmp_path):
    """Two `gputop --slurm-job J --across-nodes` at once: each starts its agent as a step of job J, so for the
    second one's agent the job's newest task step other than its own is the first one's agent step. It must
    watch the job's tasks (step 0) all the same, and no frame of it may hold the first merge's agent or py-spy."""
    import os
    import signal

    from probes.monitoring.cluster import ClusterMonitor
    from probes.outputs.recording import read_recording
    from probes.sensors.slurm import is_agent_command

    job = srun_job("straggler")
    env = {**os.environ, **job.cluster.env, "PYTHONPATH": str(REPO)}

    def start_merge(name: str) -> tuple[subprocess.Popen, Path]:
        record = tmp_path / f"{name}.jsonl"
        merge = subprocess.Popen(
            [sys.executable, "-m", "tui", "--slurm-job", job.step.job_id, "--across-nodes", "--record", str(record),
             "--snapshot", str(tmp_path / f"{name}.json"), "--duration", str(4 * TIMEOUT_S)],
            cwd=REPO, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
        return merge, record

    def agent_steps() -> list:
        steps = show_steps(SlurmStep(job.step.job_id))
        return [] if isinstance(steps, SlurmError) else [s for s in steps if s.name == "gputop-agent"]

    def frames(record: Path) -> list:
        return list(read_recording(record)) if record.exists() and record.stat().st_size else []

    merges = []
    try:
        first, first_record = start_merge("first")
        merges.append(first)
        wait_for(lambda: len(agent_steps()) == 1 and frames(first_record), timeout=TIMEOUT_S, interval=1.0)
        second, second_record = start_merge("second")
        merges.append(second)
        seen = []

        def merged():
            for merge in merges:
                assert merge.poll() is None, merge.stderr.read()
            monitor = ClusterMonitor(replay=True)
            for frame in frames(second_record):
                monitor.ingest(frame)
            found = monitor.view.job if monitor.view is not None else None
            seen[:] = [found.verdict.evidence[:1] if found else None, monitor.view.latest.job if found else None]
            return found if found is not None and len(found.ranks) == 2 and straggler_named(found) else None

        try:
            found = wait_for(merged, timeout=TIMEOUT_S, interval=2.0)
        except BaseException:
            pytest.fail(f"the second merge's last view: {seen}")
        assert len(agent_steps()) == 2, "each merge runs its own agent step"
        frames_seen = frames(second_record)
        assert {f.job.slurm_step for f in frames_seen if f.job is not None} == {str(job.step)}
        agents_watched = [p.pid for f in frames_seen for p in f.processes if is_agent_command(p.cmdline)
                          or p.name == "py-spy"]
        assert not agents_watched, f"the second merge watched the first one's agent or py-spy: {agents_watched}"
        assert found.verdict.evidence[0].startswith(f"rank 1 on {found.ranks[1].node} is the straggler: ")
    finally:
        for merge in merges:
            if merge.poll() is None:
                merge.send_signal(signal.SIGTERM)
        for merge in merges:
            try:
                merge.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                stop_process_tree(merge)
