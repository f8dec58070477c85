"""One Slurm job across two real nodes, watched from outside both: the two-node cluster of the
`slurm_two_nodes` fixture (slurmctld on this machine, a slurmd in each of the namespaced nodes n1 and n2 of
tests/support/ns_nodes.py, each seeing only its own processes), a 2-node x 1-task gloo job of
tests/targets/slurm_ddp_job.py submitted with sbatch (`srun -N2 --ntasks 2`, ranks from SLURM_PROCID and
SLURM_NTASKS, MASTER_ADDR = n1's address, GLOO_SOCKET_IFNAME = the nodes' veth), rank 1 on n2 slow or stuck.

The real command runs on the host, `python -m tui --slurm-job J --record REC --snapshot OUT`: it must start its
agents on n1 and n2 through srun (the host runs no task of the job; its /proc shows the nodes' processes, which
gputop must not take for its own) and merge them. The recording is folded as it grows until the expected verdict
is reached (never a fixed wait). Then n2's agent is killed from inside n2: n2 is lost with the time, n1 goes on.
The ranks' PIDs in the snapshot are the nodes' own (as each node sees them), proof that they came from agents.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.paths import REPO, TARGETS
from support.processes import said_ready, wait_for
from support.slurm_cluster import stop_merge

from probes.monitoring.cluster import ClusterMonitor
from probes.outputs.recording import read_recording

TIMEOUT_S = 180.0
pytestmark = [pytest.mark.slow, pytest.mark.timeout(4 * TIMEOUT_S + 60)]

BATCH_SCRIPT = """#!/bin/bash
export MASTER_ADDR={master} MASTER_PORT=29500 GLOO_SOCKET_IFNAME={interface}
export PYTHONPATH={repo} PYTHONUNBUFFERED=1
# One task a node; `& wait` keeps the batch script waiting on its step, as job scripts do.
srun -N2 --ntasks 2 --ntasks-per-node 1 {python} {target} {mode} &
wait
"""


class BatchJob:
    """The 2-node job, submitted with sbatch from this machine; its output file is on the shared filesystem."""

    def __init__(self, cluster, tmp_path: Path, mode: str) -> None:
        self.cluster = cluster
        n1 = cluster.node_set["n1"]
        script = tmp_path / f"{mode}.sh"
        script.write_text(BATCH_SCRIPT.format(master=n1.address, interface=n1.interface, repo=REPO,
                                              python=sys.executable, target=TARGETS / "slurm_ddp_job.py", mode=mode))
        self.out = tmp_path / f"{mode}.out"
        done = subprocess.run(["sbatch", "--parsable", "-N2", "-J", f"ddp2-{mode}", "--output", str(self.out),
                               str(script)], env=cluster.env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        self.job_id = done.stdout.strip().split(";")[0]

    def wait_ready(self) -> None:
        """Until rank 0 printed 'ready' (both ranks stepped together across the nodes)."""
        def ready():
            state = subprocess.run(["squeue", "-h", "-j", self.job_id, "-o", "%T"], env=self.cluster.env,
                                   capture_output=True, text=True, timeout=30).stdout.strip()
            text = self.out.read_text() if self.out.exists() else ""
            assert state in ("PENDING", "CONFIGURING", "RUNNING"), f"job {self.job_id} is {state!r}: {text}"
            return said_ready(text)

        wait_for(ready, timeout=TIMEOUT_S, interval=0.5)

    def cancel(self) -> None:
        self.cluster.cancel(self.job_id)


def fold(path: Path, hang_after_s: float) -> ClusterMonitor:
    monitor = ClusterMonitor(replay=True, hang_after_s=hang_after_s)
    if path.exists() and path.stat().st_size:
        for frame in read_recording(path):
            monitor.ingest(frame)
    return monitor


def start_merge(cluster, job_id: str, record: Path, snapshot: Path, hang_after_s: float) -> subprocess.Popen:
    """The real command on the host, outside both nodes."""
    return subprocess.Popen(
        [sys.executable, "-m", "tui", "--slurm-job", job_id, "--record", str(record), "--snapshot", str(snapshot),
         "--duration", str(3 * TIMEOUT_S), "--hang-after", f"{hang_after_s:g}"],
        cwd=REPO, env=dict(cluster.env, PYTHONPATH=str(REPO)), stderr=subprocess.PIPE, text=True,
        start_new_session=True)


def wait_job_verdict(merge: subprocess.Popen, record: Path, hang_after_s: float, accept):
    """The merged job's verdict once `accept` takes it; on timeout, the test fails with the last one seen."""
    last = []

    def reached():
        assert merge.poll() is None, merge.stderr.read()
        view = fold(record, hang_after_s).view
        job = view.job if view is not None else None
        last[:] = [(job.finding, job.responsible_rank, job.verdict.evidence[:2])] if job is not None else []
        return job if job is not None and accept(job) else None

    try:
        return wait_for(reached, timeout=TIMEOUT_S, interval=2.0)
    except pytest.fail.Exception:
        pytest.fail(f"the merged verdict never came; the last: {last}")


def node_pids(node, pattern: str) -> list[int]:
    """PIDs of the processes matching `pattern`, as the node itself numbers them."""
    return [int(pid) for pid in node.run(["pgrep", "-f", pattern]).stdout.split()]


def test_from_the_host_the_straggler_rank_and_its_node_are_named_and_a_lost_node_is_said(slurm_two_nodes,
                                                                                          tmp_path):
    cluster = slurm_two_nodes
    n2 = cluster.node_set["n2"]
    job = BatchJob(cluster, tmp_path, "straggler")
    record, snapshot = tmp_path / "job.jsonl", tmp_path / "job.json"
    merge = None
    try:
        job.wait_ready()
        merge = start_merge(cluster, job.job_id, record, snapshot, 30.0)
        # Until rank 1's own samples show where it spends its time: with a few samples on a busy machine, the
        # first verdicts may name rank 1 from a window it spent in backward.
        verdict = wait_job_verdict(merge, record, 30.0,
                                   lambda j: j.finding == "straggler" and j.responsible_rank == 1
                                   and "slow_augment" in j.verdict.evidence[0])
        assert verdict.verdict.evidence[0].startswith("rank 1 on n2 is the straggler: "), verdict.verdict.evidence
        assert "slow_augment (ddp_job.py:" in verdict.verdict.evidence[0]
        assert {(r.rank, r.node) for r in verdict.ranks} == {(0, "n1"), (1, "n2")}
        # Each rank's PID is its node's own: the agents read them inside the nodes.
        for rank in verdict.ranks:
            node = cluster.node_set[rank.node]
            assert rank.pid in node_pids(node, "slurm_ddp_job.py"), (rank, node.name)

        agents = node_pids(n2, "tui agent --slurm-job")
        assert len(agents) == 1, agents
        killed_at = time.time()
        assert n2.run(["kill", "-9", str(agents[0])]).returncode == 0
        wait_for(lambda: sum(1 for f in read_recording(record) if f.node == "n1" and f.time > killed_at + 1) >= 2,
                 timeout=TIMEOUT_S, interval=1.0)
        stderr = stop_merge(merge)
    finally:
        if merge is not None and merge.poll() is None:
            stop_merge(merge)
        job.cancel()
    assert merge.returncode == 0, stderr
    assert "starting an agent on 2 nodes (n1, n2)" in stderr, stderr
    assert "gputop: node n2: lost at" in stderr, stderr
    document = json.loads(snapshot.read_text())
    nodes = {n["name"]: n for n in document["nodes"]}
    assert nodes["n1"]["state"] == "live" and nodes["n2"]["state"] == "lost", nodes
    assert nodes["n2"]["lost_at"] >= killed_at - 1 and "stream ended" in nodes["n2"]["reason"], nodes["n2"]
    assert {(r["rank"], r["node"]) for r in document["job"]["ranks"]} == {(0, "n1")}
    assert any("n2: lost at" in line for line in document["verdict"]["evidence"])
    assert {f.node for f in read_recording(record)} == {"n1", "n2"}


def test_from_the_host_the_hung_rank_and_its_node_are_named(slurm_two_nodes, tmp_path):
    cluster = slurm_two_nodes
    job = BatchJob(cluster, tmp_path, "deadlock")
    record, snapshot = tmp_path / "hung.jsonl", tmp_path / "hung.json"
    merge = None
    try:
        job.wait_ready()
        merge = start_merge(cluster, job.job_id, record, snapshot, 5.0)
        verdict = wait_job_verdict(merge, record, 5.0,
                                   lambda j: j.finding == "hung_rank" and j.verdict.liveness == "hung")
        stderr = stop_merge(merge)
        pids_seen = {node.name: node_pids(node, "slurm_ddp_job.py") for node in cluster.node_set.nodes}
    finally:
        if merge is not None and merge.poll() is None:
            stop_merge(merge)
        job.cancel()
    assert verdict.responsible_rank == 1, verdict.verdict.evidence
    headline = verdict.verdict.evidence[0]
    assert headline.startswith("rank 1 on n2 stuck in flush_metrics (ddp_job.py:"), headline
    assert "waits for it in all_reduce" in headline, headline
    assert merge.returncode == 0, stderr
    document = json.loads(snapshot.read_text())
    assert document["job"]["finding"] == "hung_rank" and document["job"]["responsible_rank"] == 1, document["job"]
    assert {(r["rank"], r["node"]) for r in document["job"]["ranks"]} == {(0, "n1"), (1, "n2")}
    assert {n["name"]: n["state"] for n in document["nodes"]} == {"n1": "live", "n2": "live"}
    # The snapshot's PIDs are each node's own, as its agent read them there.
    for rank in document["job"]["ranks"]:
        assert rank["pid"] in pids_seen[rank["node"]], (rank["pid"], pids_seen)
