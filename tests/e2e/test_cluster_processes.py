"""The merge across nodes (probes/monitoring/cluster.py) on constructed frames: two nodes whose ranks carry the same
node-local PIDs, the straggler and the hung rank named with their node, a lost node (stream ended, or silent)
while the other goes on, a node whose GPUs clock lower, the snapshot's `nodes` and ranks' `node`, and a
recording of the merged job folding back to the same verdict.

Frames are built with tests/support/cluster_frames.py (gloo DDP ranks as py-spy shows them, on several nodes).
"""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_a_node_that_cannot_run_the_agent_is_lost_with_what_it_said():
    from probes.monitoring.cluster import AgentSpec, AgentStreams

    failing = "echo 'slurmstepd: error: execve(): /opt/venv/bin/python: No such file or directory' >&2; exit 2"
    streams = AgentStreams([AgentSpec("n1", ("sh", "-c", failing)), AgentSpec("n2", ("/nonexistent/gputop",))])
    try:
        events = {}
        deadline = 60.0
        while len(events) < 2 and deadline > 0:
            for event in streams.events(timeout=1.0):
                events[event.node] = event
            deadline -= 1.0
    finally:
        streams.close()
    assert events["n1"].ended.startswith("no frame came (exit status 2): slurmstepd: error: execve(): "
                                         "/opt/venv/bin/python: No such file or directory; it ran `sh -c ")
    assert events["n1"].ended.endswith("every node needs this gputop's Python and PYTHONPATH at the same path")
    assert events["n2"].ended.startswith("cannot start /nonexistent/gputop: No such file or directory")


@pytest.mark.slow
def test_hosts_over_ssh_that_refuse_are_each_said_in_one_line():
    """Real ssh (BatchMode=yes) to two names that never resolve (RFC 6761's .invalid): each host's own error."""
    import os
    import shutil
    import subprocess
    import sys

    import pytest

    from tui.across_nodes import ssh_agent_command

    if shutil.which("ssh") is None:
        pytest.skip("no ssh client here")
    command = ssh_agent_command("n7", ["/opt/venv/bin/python", "-m", "tui", "agent", "--follow"])
    assert command[:6] == ("ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "n7")
    assert command[-1].endswith("/opt/venv/bin/python -m tui agent --follow")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-m", "tui", "--hosts", "gputop-a.invalid,gputop-b.invalid", "--snapshot",
                           os.devnull, "--duration", "60"], cwd=repo, env=dict(os.environ, PYTHONPATH=repo),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    for host in ("gputop-a.invalid", "gputop-b.invalid"):
        assert f"{host}: lost at" in done.stderr and f"Could not resolve hostname {host}" in done.stderr, done.stderr
    assert done.stderr.count("ssh did not connect or was refused (exit status 255)") == 2, done.stderr


@pytest.mark.slow
def test_a_gputop_ssh_command_that_does_not_split_is_one_line_and_nothing_starts():
    import os
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-m", "tui", "--hosts", "a,b", "--snapshot", os.devnull],
                          cwd=repo, env=dict(os.environ, PYTHONPATH=repo, GPUTOP_SSH_COMMAND="ssh -i 'unclosed"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "gputop: GPUTOP_SSH_COMMAND: cannot split \"ssh -i 'unclosed\" as a shell would: No closing quotation"]
