"""Test "nodes" on this one machine: each node its own network, PID, mount (/proc) and UTS (hostname) namespace,
joined by a bridge on the host, so that a process in one node sees only its node's processes and reaches the
others over an address, as on a real cluster.

:func:`make_nodes` (or the :class:`NodeSet` context manager) makes a bridge with a per-run name and an
address on a /24 that no interface of the host uses (picked under a lock, so two test runs at once never
take the same one), and per node a network namespace with a veth into the bridge (``eth0`` inside, the node's
address on the /24). :meth:`Node.start` starts the node's PID 1 side: ``nsenter --net=/var/run/netns/NAME
unshare --pid --fork --mount-proc --uts bash -c "hostname n1; CMD & wait"`` in a session of its own. Not ``ip
netns exec``: it remounts /sys, and slurmd then fails on the cgroup mount. ``& wait`` keeps bash as the node's
PID 1, so that killing it (or CMD ending) ends every process of the node. :meth:`Node.spawn` starts a further
long-lived process inside a started node and :meth:`Node.run` a short command, both through ``nsenter`` into
the namespaces of the node's PID 1. :meth:`NodeSet.teardown` kills each node's PID 1 (the kernel then kills
the rest of its PID namespace), deletes the network namespaces (their veths go with them) and the bridge.

:class:`NodesUnavailable` carries the reason when namespaces cannot be made here (not root, no ``ip`` or
``nsenter``, a kernel or container that refuses); a fixture turns it into a skip.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = ("ip", "nsenter", "unshare", "bash", "hostname")
# The /24s tried, 10.99.0.0/24 first: a test run takes the first one no interface or route of the host uses.
SUBNET_CANDIDATES = tuple(ipaddress.ip_network(f"10.99.{third}.0/24") for third in range(256))
LOCK_PATH = Path("/run/gputop-ns-nodes.lock")
INTERFACE = "eth0"  # the veth's name inside each node: every node has its own link namespace
FIRST_NODE_HOST = 11  # node i gets .(10 + i) on the /24; the bridge has .1
START_TIMEOUT_S = 30.0


class NodesUnavailable(Exception):
    """Why the namespaced nodes cannot be made here: one line a skip reason can carry."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and out.returncode != 0:
        raise NodesUnavailable(f"`ip {' '.join(args)}` failed: {out.stderr.strip() or out.returncode}")
    return out


@dataclass
class Node:
    """One namespaced node: `name` is its hostname and Slurm node name (n1, n2, ...); `netns` its network
    namespace's name on the host (unique per run); `address` its IPv4 address on the bridge's /24."""

    name: str
    netns: str
    host_veth: str
    address: str
    interface: str = INTERFACE
    init: subprocess.Popen | None = None
    init_pid: int | None = None  # the host's PID of the node's PID 1 (the bash)
    spawned: list[subprocess.Popen] = field(default_factory=list)

    def start(self, command: str = "sleep infinity", *, env: dict[str, str] | None = None,
              cwd: str | Path | None = None, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) -> None:
        """Start the node's PID 1 (bash) running the shell `command` in the background and waiting for it: the
        node lives as long as `command` does. Returns once the node's PID 1 exists."""
        script = f"hostname {shlex.quote(self.name)}; {command} & wait"
        self.init = subprocess.Popen(
            ["nsenter", f"--net=/var/run/netns/{self.netns}", "unshare", "--pid", "--fork", "--mount-proc",
             "--uts", "bash", "-c", script],
            env=env, cwd=cwd, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while (pid := _namespace_init(self.init.pid)) is None:
            if self.init.poll() is not None:
                raise NodesUnavailable(f"node {self.name} did not start: `nsenter ... unshare --pid` exited "
                                       f"with {self.init.returncode}")
            if time.monotonic() > deadline:
                raise NodesUnavailable(f"node {self.name}: no PID 1 after {START_TIMEOUT_S:g} s")
            time.sleep(0.05)
        self.init_pid = pid

    def enter_argv(self, argv: list[str]) -> list[str]:
        """`argv` run inside this node: its network, PID, mount and UTS namespaces (those of its PID 1)."""
        if self.init_pid is None:
            raise RuntimeError(f"node {self.name} is not started")
        return ["nsenter", "-t", str(self.init_pid), "--net", "--pid", "--mount", "--uts", "--", *argv]

    def run(self, argv: list[str], *, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        """A short command inside the node; its output as text."""
        return subprocess.run(self.enter_argv(argv), capture_output=True, text=True, timeout=timeout, **kwargs)

    def spawn(self, argv: list[str], **popen_kwargs) -> subprocess.Popen:
        """A long-lived process inside the node, in a session of its own; it dies with the node at teardown."""
        popen_kwargs.setdefault("stdin", subprocess.DEVNULL)
        proc = subprocess.Popen(self.enter_argv(argv), start_new_session=True, **popen_kwargs)
        self.spawned.append(proc)
        return proc

    def pids(self) -> set[int]:
        """The PIDs this node sees (its own /proc)."""
        out = self.run(["bash", "-c", "ls /proc"])
        return {int(entry) for entry in out.stdout.split() if entry.isdigit()}

    def stop(self) -> None:
        """Kill the node's PID 1: the kernel kills every other process of its PID namespace."""
        if self.init_pid is not None:
            _signal(self.init_pid, signal.SIGKILL)
        for proc in (*self.spawned, *([self.init] if self.init else [])):
            _signal(proc.pid, signal.SIGKILL)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self.init_pid is not None:
            _wait_gone(self.init_pid, 10.0)
        self.init_pid = None


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_gone(pid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def _namespace_init(unshare_pid: int) -> int | None:
    """The host PID of the PID 1 that `unshare --pid --fork` (host PID `unshare_pid`) forked: its child whose
    last NSpid is 1. None until it exists."""
    try:
        children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        try:
            status = Path(f"/proc/{child}/status").read_text()
        except OSError:
            continue
        nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
        if len(nspid) >= 2 and nspid[-1] == "1":
            return int(child)
    return None


@dataclass
class NodeSet:
    """The bridge and its nodes of one test run. A context manager: tears down on exit."""

    suffix: str
    bridge: str
    bridge_address: str
    network: ipaddress.IPv4Network
    nodes: list[Node] = field(default_factory=list)

    def __enter__(self) -> NodeSet:
        return self

    def __exit__(self, *exc) -> None:
        self.teardown()

    def __getitem__(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    def teardown(self) -> None:
        """Kill every process of every node, delete the namespaces (their veths go with them) and the bridge.
        Safe to call twice and after a partial setup."""
        for node in self.nodes:
            node.stop()
        for node in self.nodes:
            _ip("link", "del", node.host_veth, check=False)
            _ip("netns", "del", node.netns, check=False)
        _ip("link", "del", self.bridge, check=False)


def _used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network an interface of the host has an address on, or a route goes to."""
    used = []
    for line in _ip("-o", "-4", "addr", "show").stdout.splitlines():
        parts = line.split()
        if "inet" in parts:
            used.append(ipaddress.ip_interface(parts[parts.index("inet") + 1]).network)
    for line in _ip("-4", "route", "show", "table", "all", check=False).stdout.splitlines():
        dest = line.split()[0] if line.split() else ""
        if dest and dest[0].isdigit():
            try:
                used.append(ipaddress.ip_network(dest, strict=False))
            except ValueError:
                continue
    return used


def _free_subnet() -> ipaddress.IPv4Network:
    used = _used_networks()
    for candidate in SUBNET_CANDIDATES:
        if not any(candidate.overlaps(net) for net in used if net.prefixlen > 0):
            return candidate
    raise NodesUnavailable("no free /24 under 10.99.0.0/16 for the test nodes' bridge")


def check_available() -> None:
    """NodesUnavailable with the reason when this machine cannot make namespaced nodes."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise NodesUnavailable(f"namespaced test nodes need {', '.join(missing)} (iproute2, util-linux)")
    if os.geteuid() != 0:
        raise NodesUnavailable("namespaced test nodes need root (ip netns, a bridge): not root here")


def make_nodes(count: int = 2) -> NodeSet:
    """A bridge and `count` nodes n1..nCOUNT with their network namespaces (not started: call Node.start)."""
    check_available()
    suffix = secrets.token_hex(3)  # 6 hex digits: the longest name below is 'gtv' + 6 + 2 digits <= 15 chars
    bridge = f"gtb{suffix}"
    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    with LOCK_PATH.open("a") as lock:
        # Held from picking the /24 until the bridge has its address, so another run sees it as used.
        fcntl.flock(lock, fcntl.LOCK_EX)
        network = _free_subnet()
        bridge_address = str(network.network_address + 1)
        nodes = NodeSet(suffix=suffix, bridge=bridge, bridge_address=bridge_address, network=network)
        try:
            _ip("link", "add", bridge, "type", "bridge")
            _ip("addr", "add", f"{bridge_address}/{network.prefixlen}", "dev", bridge)
        except BaseException:
            nodes.teardown()
            raise
    try:
        _ip("link", "set", bridge, "up")
        for index in range(1, count + 1):
            node = Node(name=f"n{index}", netns=f"gtn{suffix}{index}", host_veth=f"gtv{suffix}{index}",
                        address=str(network.network_address + FIRST_NODE_HOST + index - 1))
            nodes.nodes.append(node)
            _ip("netns", "add", node.netns)
            _ip("link", "add", node.host_veth, "type", "veth", "peer", "name", INTERFACE, "netns", node.netns)
            _ip("link", "set", node.host_veth, "master", bridge, "up")
            _ip("-n", node.netns, "addr", "add", f"{node.address}/{network.prefixlen}", "dev", INTERFACE)
            _ip("-n", node.netns, "link", "set", INTERFACE, "up")
            _ip("-n", node.netns, "link", "set", "lo", "up")
            _ip("-n", node.netns, "route", "add", "default", "via", bridge_address)
    except BaseException:
        nodes.teardown()
        raise
    return nodes
