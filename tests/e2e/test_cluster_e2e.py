"""One job across two "nodes" merged end to end: a real 4-rank gloo DDP job launched by two real torchrun
launchers (--nnodes 2 --node_rank 0|1, two ranks each, rank 3 slow in its augmentation), one real `gputop
agent --pid <launcher>` per node (SLURMD_NODENAME=n1 / n2) attaching real py-spy, and the real merging command
(`python -m tui --agent-command ... --record REC --snapshot OUT`), whose agents it starts itself.

Neither node alone can say who holds the job back (n1's ranks only wait); the merge names rank 3 on n2. The
recording is folded as it grows until that verdict is reached (never a fixed wait); then n2's agent is killed
and the merge, still running, shows n2 lost while n1's frames go on. The same job with rank 3 deadlocked in
flush_metrics: the merge names rank 3 on n2 stuck, the other ranks waiting for it in all_reduce.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from support.paths import REPO
from support.processes import free_port, said_ready, wait_for

from probes.monitoring.cluster import ClusterMonitor
from probes.outputs.recording import read_recording

TIMEOUT_S = 180.0
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3 * TIMEOUT_S + 60)]


def start_two_nodes(spawn_target, tmp_path: Path, mode: str = "straggler"):
    """The two launchers of one 4-rank job; returns them once rank 0 has printed 'ready' (all four stepped)."""
    port = str(free_port())
    outs = [tmp_path / f"node{k}.out" for k in (0, 1)]
    launchers = []
    for k, out in enumerate(outs):
        with out.open("w") as handle:
            launchers.append(spawn_target("ddp_job.py", mode, "--launch-node", str(k), "--nnodes", "2",
                                          "--master-port", port, "--slow-rank", "3",
                                          stdout=handle, stderr=subprocess.STDOUT))
    wait_for(lambda: said_ready(outs[0].read_text()) or any(p.poll() is not None for p in launchers),
             timeout=TIMEOUT_S, interval=0.5)
    assert all(p.poll() is None for p in launchers), [o.read_text()[-2000:] for o in outs]
    return launchers


def fold(path: Path) -> ClusterMonitor:
    monitor = ClusterMonitor(replay=True)
    if path.exists() and path.stat().st_size:
        for frame in read_recording(path):
            monitor.ingest(frame)
    return monitor


def agent_command(node: str, pid: int) -> str:
    return f"env SLURMD_NODENAME={node} {sys.executable} -m tui agent --pid {pid} --hang-after 30"


def test_the_merge_names_the_straggler_rank_and_its_node_and_a_lost_node_is_said(spawn_target, tmp_path):
    launchers = start_two_nodes(spawn_target, tmp_path)
    record, snapshot = tmp_path / "job.jsonl", tmp_path / "job.json"
    merge = subprocess.Popen(
        [sys.executable, "-m", "tui", "--agent-command", agent_command("n1", launchers[0].pid),
         "--agent-command", agent_command("n2", launchers[1].pid), "--record", str(record),
         "--snapshot", str(snapshot), "--duration", str(3 * TIMEOUT_S), "--hang-after", "30"],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        def named():
            assert merge.poll() is None, merge.stderr.read()
            job = fold(record).view
            job = job.job if job is not None else None
            return job if job is not None and job.finding == "straggler" and job.responsible_rank == 3 else None

        job = wait_for(named, timeout=TIMEOUT_S, interval=2.0)
        assert job.verdict.evidence[0].startswith("rank 3 on n2 is the straggler: "), job.verdict.evidence
        assert "slow_augment (ddp_job.py:" in job.verdict.evidence[0]
        assert {(r.rank, r.node) for r in job.ranks} == {(0, "n1"), (1, "n1"), (2, "n2"), (3, "n2")}
        # Each node alone: n1's ranks only wait, and its own verdict names no straggler of its own.
        alone = fold(record).nodes["n1"].monitor.view.job
        assert alone is None or alone.responsible_rank != 3

        agents = [p for p in psutil.Process(merge.pid).children() if "agent" in p.cmdline()]
        n2_agent = next(p for p in agents if f"--pid {launchers[1].pid}" in " ".join(p.cmdline()))
        killed_at = time.time()
        n2_agent.kill()
        wait_for(lambda: sum(1 for f in read_recording(record) if f.node == "n1" and f.time > killed_at + 1) >= 2,
                 timeout=TIMEOUT_S, interval=1.0)
        merge.send_signal(signal.SIGTERM)
        _, stderr = merge.communicate(timeout=60)
    finally:
        if merge.poll() is None:
            merge.kill()
            merge.wait()
    assert merge.returncode == 0, stderr
    assert "gputop: node n2: lost at" in stderr, stderr
    document = json.loads(snapshot.read_text())
    nodes = {n["name"]: n for n in document["nodes"]}
    assert nodes["n1"]["state"] == "live" and nodes["n2"]["state"] == "lost", nodes
    assert nodes["n2"]["lost_at"] >= killed_at - 1 and "stream ended" in nodes["n2"]["reason"]
    assert {(r["rank"], r["node"]) for r in document["job"]["ranks"]} == {(0, "n1"), (1, "n1")}
    assert any("n2: lost at" in line for line in document["verdict"]["evidence"])
    # One recording for the whole job: both nodes' frames, each marked with its node; replay merges it again.
    assert {f.node for f in read_recording(record)} == {"n1", "n2"}
    replayed = tmp_path / "replayed.json"
    done = subprocess.run([sys.executable, "-m", "tui", "replay", str(record), "--snapshot", str(replayed)],
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    again = json.loads(replayed.read_text())
    assert [n["name"] for n in again["nodes"]] == ["n1", "n2"]
    assert {r["node"] for r in again["job"]["ranks"]} <= {"n1", "n2"}
    for launcher in launchers:
        assert launcher.poll() is None  # the merge never touched the job


def test_the_merge_names_the_hung_rank_and_its_node(spawn_target, tmp_path):
    launchers = start_two_nodes(spawn_target, tmp_path, "deadlock")
    record = tmp_path / "hung.jsonl"
    merge = subprocess.Popen(
        [sys.executable, "-m", "tui", "--agent-command", agent_command("n1", launchers[0].pid),
         "--agent-command", agent_command("n2", launchers[1].pid), "--record", str(record),
         "--snapshot", os.devnull, "--duration", str(3 * TIMEOUT_S), "--hang-after", "5"],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        def hung():
            assert merge.poll() is None, merge.stderr.read()
            monitor = ClusterMonitor(replay=True, hang_after_s=5.0)
            if record.exists() and record.stat().st_size:
                for frame in read_recording(record):
                    monitor.ingest(frame)
            job = monitor.view.job if monitor.view is not None else None
            return job if job is not None and job.finding == "hung_rank" and job.verdict.liveness == "hung" else None

        job = wait_for(hung, timeout=TIMEOUT_S, interval=2.0)
    finally:
        merge.send_signal(signal.SIGTERM)
        merge.communicate(timeout=60)
    assert job.responsible_rank == 3, job.verdict.evidence
    headline = job.verdict.evidence[0]
    assert headline.startswith("rank 3 on n2 stuck in flush_metrics (ddp_job.py:"), headline
    assert "waits for it in all_reduce" in headline, headline
