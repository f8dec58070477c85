"""`gputop --hosts` over real ssh, from the host, to two namespaced nodes (tests/support/ns_nodes.py) that each see only
their own processes and run an sshd of the test's (tests/support/ssh_nodes.py): a 2-node gloo job, one torchrun
launcher inside each node (`--nnodes 2 --node_rank 0|1 --nproc_per_node 1`, MASTER_ADDR = n1's address,
GLOO_SOCKET_IFNAME = the node's veth), rank 1 on n2 slow in its augmentation (tests/targets/ddp_job.py).

`python -m tui --hosts <n1 addr>,<n2 addr>` runs on the host with GPUTOP_SSH_COMMAND giving ssh the test's key
and known hosts; its agents run over ssh inside the nodes and name themselves n1 and n2 (their hostnames). The
recording is folded as it grows until the merge names rank 1 on n2 (never a fixed wait); then n2's agent is
killed inside n2: n2 is lost with the time, n1 goes on. A node whose sshd refuses the key is one line of its
own while the other node's frames come.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.paths import REPO, TARGETS
from support.processes import said_ready, wait_for

from probes.monitoring.cluster import ClusterMonitor
from probes.outputs.recording import read_recording

TIMEOUT_S = 180.0
MASTER_PORT = "29500"  # free: n1 has a network namespace of its own
pytestmark = [pytest.mark.slow, pytest.mark.timeout(5 * TIMEOUT_S + 60)]


class SshJob:
    """Two started nodes with their sshd and the 2-node job running across them."""

    def __init__(self, node_set, ssh, folder: Path) -> None:
        self.node_set, self.ssh, self.folder = node_set, ssh, folder
        self.n1, self.n2 = node_set["n1"], node_set["n2"]
        self.hosts = f"{self.n1.address},{self.n2.address}"
        self.outs = {}

    def start_job(self) -> None:
        """One torchrun launcher inside each node; returns once rank 0 printed 'ready' (both ranks stepped)."""
        launchers = {}
        for rank, node in enumerate((self.n1, self.n2)):
            out = self.folder / f"torchrun_{node.name}.out"
            self.outs[node.name] = out
            env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", GLOO_SOCKET_IFNAME=node.interface)
            with out.open("w") as handle:
                launchers[node.name] = node.spawn(
                    [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(rank),
                     "--nproc_per_node", "1", "--master_addr", self.n1.address, "--master_port", MASTER_PORT,
                     str(TARGETS / "ddp_job.py"), "straggler", "--slow-rank", "1"],
                    env=env, stdout=handle, stderr=subprocess.STDOUT)

        def ready():
            # A launcher that ended fails at once, with its output; one not yet forked into its node (nsenter
            # on a loaded machine) is waited for, as is each node's rank.
            for node in (self.n1, self.n2):
                launcher = launchers[node.name]
                assert launcher.poll() is None, \
                    f"{node.name}: exited {launcher.returncode}: {self.outs[node.name].read_text()[-2000:]}"
            return said_ready(self.outs["n1"].read_text()) and all(
                node_pids(node, "ddp_job.py") for node in (self.n1, self.n2))

        wait_for(ready, timeout=TIMEOUT_S, interval=0.5)

    def merge(self, tmp_path: Path, record: Path, snapshot: Path, ssh_command: str) -> tuple[subprocess.Popen, Path]:
        """The real command on the host, outside both nodes; its stderr goes to a file read as it grows."""
        stderr = tmp_path / "merge.err"
        with stderr.open("w") as handle:
            merge = subprocess.Popen(
                [sys.executable, "-m", "tui", "--hosts", self.hosts, "--record", str(record), "--snapshot",
                 str(snapshot), "--duration", str(3 * TIMEOUT_S), "--hang-after", "30"],
                cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO), GPUTOP_SSH_COMMAND=ssh_command),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=handle, start_new_session=True)
        return merge, stderr


def node_pids(node, pattern: str) -> list[int]:
    """PIDs of the processes matching `pattern`, as the node itself numbers them."""
    return [int(pid) for pid in node.run(["pgrep", "-f", pattern]).stdout.split()]


def fold(path: Path) -> ClusterMonitor:
    monitor = ClusterMonitor(replay=True, hang_after_s=30.0)
    if path.exists() and path.stat().st_size:
        for frame in read_recording(path):
            monitor.ingest(frame)
    return monitor


def stop_merge(merge: subprocess.Popen, stderr: Path) -> str:
    if merge.poll() is None:
        merge.send_signal(signal.SIGTERM)
    try:
        merge.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(merge.pid, signal.SIGKILL)
        merge.wait()
    return stderr.read_text()


@pytest.fixture(scope="module")
def ssh_job(tmp_path_factory):
    """Nodes n1, n2 with an sshd each and the straggler job across them, for this module; all torn down at its
    end (the nodes' teardown ends every process inside them). Skips with the reason where it cannot run."""
    from support.ns_nodes import NodesUnavailable, make_nodes
    from support.ssh_nodes import SshUnavailable, check_available, start_sshds

    try:
        check_available()
        node_set = make_nodes(2)
    except (NodesUnavailable, SshUnavailable) as exc:
        pytest.skip(str(exc))
    ssh = None
    try:
        for node in node_set.nodes:
            node.start()
        folder = tmp_path_factory.mktemp("ssh_nodes")
        ssh = start_sshds(node_set, folder)
        job = SshJob(node_set, ssh, folder)
        job.start_job()
        yield job
    finally:
        if ssh is not None:
            ssh.stop()
        node_set.teardown()


def test_over_ssh_the_straggler_rank_and_its_node_are_named_and_a_lost_node_is_said(ssh_job, tmp_path):
    job = ssh_job
    record, snapshot = tmp_path / "job.jsonl", tmp_path / "job.json"
    merge, stderr_path = job.merge(tmp_path, record, snapshot, job.ssh.ssh_command())
    try:
        def named():
            assert merge.poll() is None, stderr_path.read_text()
            view = fold(record).view
            found = view.job if view is not None else None
            return found if found is not None and found.finding == "straggler" and found.responsible_rank == 1 \
                else None

        verdict = wait_for(named, timeout=TIMEOUT_S, interval=2.0)
        assert verdict.verdict.evidence[0].startswith("rank 1 on n2 is the straggler: "), verdict.verdict.evidence
        assert "slow_augment (ddp_job.py:" in verdict.verdict.evidence[0]
        assert {(r.rank, r.node) for r in verdict.ranks} == {(0, "n1"), (1, "n2")}
        for rank in verdict.ranks:  # each rank's PID is its node's own: the agents ran inside the nodes
            assert rank.pid in node_pids(job.node_set[rank.node], "ddp_job.py"), rank

        agents = node_pids(job.n2, "tui agent --follow")
        assert agents, job.n2.run(["ps", "-ef"]).stdout
        killed_at = time.time()
        for pid in agents:
            job.n2.run(["kill", "-9", str(pid)])
        wait_for(lambda: sum(1 for f in read_recording(record) if f.node == "n1" and f.time > killed_at + 1) >= 2,
                 timeout=TIMEOUT_S, interval=1.0)
        stderr = stop_merge(merge, stderr_path)
    finally:
        if merge.poll() is None:
            stop_merge(merge, stderr_path)
    assert merge.returncode == 0, stderr
    assert f"starting an agent on 2 nodes ({job.hosts.replace(',', ', ')})" in stderr, stderr
    assert "gputop: node n2: lost at" in stderr and "Traceback" not in stderr, stderr
    document = json.loads(snapshot.read_text())
    nodes = {n["name"]: n for n in document["nodes"]}
    # The agents name their nodes n1 and n2: the addresses the merge was given are those nodes, not two more.
    assert set(nodes) == {"n1", "n2"}, nodes
    assert nodes["n1"]["state"] == "live" and nodes["n2"]["state"] == "lost", nodes
    assert nodes["n2"]["lost_at"] >= killed_at - 1 and "stream ended" in nodes["n2"]["reason"], nodes["n2"]
    assert {(r["rank"], r["node"]) for r in document["job"]["ranks"]} == {(0, "n1")}
    assert any("n2: lost at" in line for line in document["verdict"]["evidence"])
    assert {f.node for f in read_recording(record)} == {"n1", "n2"}


def test_a_host_that_refuses_the_key_is_one_line_and_the_other_works(ssh_job, tmp_path):
    from support.ssh_nodes import make_key

    job = ssh_job
    authorized = job.ssh.authorized_keys["n2"]
    kept = authorized.read_text()
    authorized.write_text(make_key(tmp_path / "other_key", "not-gputop's") + "\n")  # n2 now refuses our key
    record, snapshot = tmp_path / "refused.jsonl", tmp_path / "refused.json"
    merge, stderr_path = job.merge(tmp_path, record, snapshot, job.ssh.ssh_command())
    refused = f"gputop: node {job.n2.address}: lost at"
    try:
        def n1_answers_and_n2_is_said():
            assert merge.poll() is None, stderr_path.read_text()
            frames = [f for f in read_recording(record)] if record.exists() and record.stat().st_size else []
            return sum(1 for f in frames if f.node == "n1") >= 3 and refused in stderr_path.read_text()

        wait_for(n1_answers_and_n2_is_said, timeout=TIMEOUT_S, interval=1.0)
        stderr = stop_merge(merge, stderr_path)
    finally:
        if merge.poll() is None:
            stop_merge(merge, stderr_path)
        authorized.write_text(kept)
    assert merge.returncode == 0, stderr
    lines = [line for line in stderr.splitlines() if job.n2.address in line and "starting an agent" not in line]
    assert len(lines) == 1 and lines[0].startswith(refused), stderr
    assert "no frame came: ssh did not connect or was refused (exit status 255): " in lines[0], lines[0]
    assert "Permission denied (publickey)" in lines[0] and "Traceback" not in stderr, stderr
    assert "same path" not in lines[0]  # not the hint for a node that lacks the installation: ssh was refused
    document = json.loads(snapshot.read_text())
    nodes = {n["name"]: n for n in document["nodes"]}
    assert nodes["n1"]["state"] == "live" and nodes[job.n2.address]["state"] == "lost", nodes
    assert {(r["rank"], r["node"]) for r in document["job"]["ranks"]} == {(0, "n1")}
