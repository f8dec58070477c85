"""A rank that died on another node, watched from outside the job: the two-node cluster of the `slurm_two_nodes`
fixture (slurmctld on this machine, a slurmd in each of the namespaced nodes n1 and n2, each seeing only its own
processes), a two-task gloo job of tests/targets/slurm_rank_exits.py submitted with sbatch (`srun -N2 --ntasks 2
--ntasks-per-node 1`): its task 1, on n2, exits with status 1 after a few steps while task 0 on n1 waits for it
in all_reduce (a helper the task leaves holds its connections open, as a crashed rank's child would).

Once srun has written the task's end in the job's output, the real command runs on the host, `python -m tui
--slurm-job J --record REC --snapshot OUT`: its agent on n2 finds no task of the job there and says so (with
Slurm's account of it) instead of ending as if the node were lost. The snapshot must name the gone rank with its
node, its exit status and the time srun wrote it, say that rank 0 waits for it, and never call n2 lost.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO, TARGETS
from support.processes import said_ready, wait_for
from support.slurm_cluster import stop_merge

from probes.monitoring.cluster import ClusterMonitor
from probes.outputs.recording import read_recording
from probes.sensors.slurm import clock

TIMEOUT_S = 180.0
HANG_AFTER_S = 5.0
SRUN_LINE = "srun: error: n2: task 1: Exited with exit code 1"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(4 * TIMEOUT_S + 60)]

BATCH_SCRIPT = """#!/bin/bash
export MASTER_ADDR={master} MASTER_PORT=29500 GLOO_SOCKET_IFNAME={interface}
export PYTHONPATH={repo} PYTHONUNBUFFERED=1
srun -N2 --ntasks 2 --ntasks-per-node 1 {python} {target} &
wait
"""


def submit(cluster, tmp_path: Path) -> tuple[str, Path]:
    """The job, submitted from this machine; its output file (srun's lines included) is on the shared folder."""
    n1 = cluster.node_set["n1"]
    script = tmp_path / "rank_exits.sh"
    script.write_text(BATCH_SCRIPT.format(master=n1.address, interface=n1.interface, repo=REPO,
                                          python=sys.executable, target=TARGETS / "slurm_rank_exits.py"))
    out = tmp_path / "rank_exits.out"
    done = subprocess.run(["sbatch", "--parsable", "-N2", "-J", "rank-exits", "--output", str(out), str(script)],
                          env=cluster.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0], out


def wait_task_ended(cluster, job_id: str, out: Path) -> None:
    """Until srun has written task 1's end in the job's output, the job still running (task 0 waits)."""
    def ended():
        state = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], env=cluster.env, capture_output=True,
                               text=True, timeout=30).stdout.strip()
        text = out.read_text() if out.exists() else ""
        assert state in ("PENDING", "CONFIGURING", "RUNNING"), f"job {job_id} is {state!r}: {text}"
        return said_ready(text) and SRUN_LINE in text

    wait_for(ended, timeout=TIMEOUT_S, interval=0.5)


def n1_frames_after_hung(record: Path, rounds: int) -> bool:
    """n1's frames (rank 0) say hung, and `rounds` more frames of n1 came after the first that did: by then the
    merge has folded what n2's agent said at its start many times over."""
    if not record.exists() or not record.stat().st_size:
        return False
    monitor = ClusterMonitor(replay=True, hang_after_s=HANG_AFTER_S)
    after = None
    for frame in read_recording(record):
        view = monitor.ingest(frame)
        if after is None and view is not None and view.verdict.liveness == "hung":
            after = 0
        elif after is not None and frame.node == "n1":
            after += 1
    return after is not None and after >= rounds


def test_a_rank_whose_task_exited_on_another_node_is_named_gone_with_its_status_and_the_node_is_not_lost(
        slurm_two_nodes, tmp_path):
    cluster = slurm_two_nodes
    n2 = cluster.node_set["n2"]
    job_id, out = submit(cluster, tmp_path)
    record, snapshot = tmp_path / "job.jsonl", tmp_path / "job.json"
    merge = None
    try:
        wait_task_ended(cluster, job_id, out)
        written_at = out.stat().st_mtime  # srun's line is the file's last: when srun wrote it
        merge = subprocess.Popen(
            [sys.executable, "-m", "tui", "--slurm-job", job_id, "--record", str(record), "--snapshot",
             str(snapshot), "--duration", str(3 * TIMEOUT_S), "--hang-after", f"{HANG_AFTER_S:g}"],
            cwd=REPO, env=dict(cluster.env, PYTHONPATH=str(REPO)), stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        wait_for(lambda: merge.poll() is None and n1_frames_after_hung(record, 3), timeout=TIMEOUT_S, interval=1.0)
        stderr = stop_merge(merge)
    finally:
        if merge is not None and merge.poll() is None:
            stop_merge(merge)
        cluster.cancel(job_id)
        for pid in n2.run(["pgrep", "-f", "slurm_rank_exits.py"]).stdout.split():  # the helper task 1 left
            n2.run(["kill", "-9", pid])
    assert merge.returncode == 0, stderr
    assert f"gputop: node n2: no task of job {job_id} here" in stderr, stderr
    assert "lost" not in stderr, stderr
    document = json.loads(snapshot.read_text())
    headline = document["verdict"]["evidence"][0]
    assert headline.startswith(f"rank 1 on n2 is gone: its task exited with status 1 at {clock(written_at)}; "
                               "rank 0 waits for it in all_reduce until "), headline
    assert (document["job"]["finding"], document["job"]["responsible_rank"]) == ("rank_exited", 1), document["job"]
    assert (document["verdict"]["bottleneck"], document["verdict"]["liveness"]) == ("comms_bound", "hung")
    nodes = {n["name"]: n for n in document["nodes"]}
    assert (nodes["n1"]["state"], nodes["n2"]["state"]) == ("live", "no_task"), nodes
    assert SRUN_LINE in nodes["n2"]["line"] and str(out) in nodes["n2"]["line"], nodes["n2"]
    assert not any("lost" in line for line in document["verdict"]["evidence"]), document["verdict"]["evidence"]
    assert {(r["rank"], r["node"]) for r in document["job"]["ranks"]} == {(0, "n1")}
