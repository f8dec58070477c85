"""The namespaced test nodes (tests/support/ns_nodes.py): two nodes reach each other over their bridge, and each sees
only its own processes."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from support.ns_nodes import NodesUnavailable, make_nodes

# Answers one connection with this node's hostname: what a node's own server says proves which node answered.
LISTENER = """
import socket, sys
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
while True:
    conn, _ = server.accept()
    conn.sendall(socket.gethostname().encode())
    conn.close()
"""
CONNECT = """
import socket, sys, time
deadline = time.monotonic() + 30
while True:
    try:
        with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) as conn:
            print(conn.recv(100).decode())
            break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.1)
"""
PORT = "7777"
pytestmark = pytest.mark.slow  # real namespaces and processes, several seconds


@pytest.fixture
def two_nodes():
    try:
        nodes = make_nodes(2)
    except NodesUnavailable as exc:
        pytest.skip(str(exc))
    try:
        for node in nodes.nodes:
            node.start()
        yield nodes
    finally:
        nodes.teardown()
    assert subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.count(nodes.suffix) == 0


def test_nodes_reach_each_other_by_address(two_nodes):
    n1, n2 = two_nodes["n1"], two_nodes["n2"]
    assert n1.run(["hostname"]).stdout.strip() == "n1"
    for server, client in ((n1, n2), (n2, n1)):
        server.spawn([sys.executable, "-c", LISTENER, server.address, PORT])
        out = client.run([sys.executable, "-c", CONNECT, server.address, PORT])
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == server.name
    # The host reaches them too, through the bridge (slurmctld on the host depends on it).
    out = subprocess.run([sys.executable, "-c", CONNECT, n2.address, PORT], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "n2", out.stderr


def test_a_process_of_one_node_is_not_seen_in_the_other(two_nodes):
    n1, n2 = two_nodes["n1"], two_nodes["n2"]
    marker = "gputop-ns-marker"
    n1.spawn(["bash", "-c", f"exec -a {marker} sleep 600"])
    deadline = time.monotonic() + 30
    # exec -a: the sleep's argv[0] becomes the marker once bash has exec'd it.
    while not (seen := [line for line in n1.run(["pgrep", "-af", marker]).stdout.splitlines()
                        if line.split()[1] == marker]):
        assert time.monotonic() < deadline, "the process never showed in node 1"
        time.sleep(0.1)
    node_pid = int(seen[0].split()[0])
    assert node_pid < 100  # a PID of node 1's own namespace, not the host's
    assert n2.run(["pgrep", "-af", marker]).stdout == ""
    assert marker not in n2.run(["cat", f"/proc/{node_pid}/cmdline"]).stdout
    assert node_pid in n1.pids()
    # Each node's PID 1 is its own bash; killing the nodes leaves nothing of the marker on the host.
    assert n1.run(["cat", "/proc/1/comm"]).stdout.strip() == "bash"
    two_nodes.teardown()
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 1
