"""Where a job's ranks run, as the job itself shows it, when no launcher states this node's share of the world.

A job started by hand (``MASTER_ADDR=127.0.0.1 MASTER_PORT=... WORLD_SIZE=2 RANK=1 python train.py &``, as
tutorials do) or by a launcher gputop does not know states its world size but not how many of its ranks this node
holds: its unseen ranks could be on other nodes. The job tells more (:func:`one_machine_reason`):

* where its ranks meet: a MASTER_ADDR of this machine (a loopback address, "localhost", or this machine's own
  name or address, :func:`machine_names`);
* whom its ranks here talk to: every TCP connection of theirs (the rendezvous store, the backend's pairs; read
  from the kernel by probes/sensors/tcpinfo.py) ends at an address of this machine. A connection to a web port
  (a logger's HTTPS) is no process group's and is left out;
* no variable names another node (SLURM_NNODES=2, NODE_RANK=1, ...: probes/sensors/process_facts.py).

With all three the whole job runs on this machine, and an unseen rank is not running (probes/jobs/world.py names
it missing). Any of them absent or unreadable leaves it untold: the rank is only "not on this node".

Before an unseen rank is called anything, this machine's processes are searched for it (:func:`find_ranks_here`):
one with the job's MASTER_ADDR, MASTER_PORT, WORLD_SIZE and that RANK in its environment, outside the watched tree
(started from another terminal), is the rank, running here. A helper the rank left behind carries the same
environment and may hold its sockets open (a ``sleep`` that a shell command started, a forked child, a DataLoader
worker): :func:`is_rank_itself` tells it apart, and one that holds TCP connections open is reported as the rank's
leftover (it keeps the others waiting where gloo would fail them at once), never as the rank.

This module owns this machine's own names and addresses (the hostname, psutil's interface addresses). The
:class:`Locator` reads at most every RECHECK_S, and only while a rank is unseen: a scan of the machine's processes
and one sock_diag dump are too much for every tick. A rank it found running here is checked every tick (one read of
its environment), and read again as soon as it has ended: the frames then bracket its end within a tick
(probes/diagnosis/absent_ranks.py says when it exited).
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import psutil

from probes.jobs.facts import ProcessFacts
from probes.sensors.process_facts import (
    ProcessStat,
    int_or_none,
    is_python_command,
    other_nodes_named,
    read_environ,
    read_process_stat,
)
from probes.sensors.proctree import DATALOADER_WORKER_COMM, node_processes
from probes.sensors.tcpinfo import TCP_ESTABLISHED, read_tcp_sockets, socket_inodes

RECHECK_S = 10.0
# Names every machine gives itself (/etc/hosts' usual entries).
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
# Peers on these ports are web services (a logger's HTTPS, a metrics push), never a process group's store or pair:
# gloo and NCCL listen on ephemeral ports, the store on MASTER_PORT.
WEB_PORTS = frozenset({80, 443})


@dataclass(frozen=True)
class Placement:
    """Where the unseen ranks of a job are, as far as this machine shows."""

    one_machine: str | None = None  # why every rank runs on this machine ("MASTER_ADDR 127.0.0.1"); None: untold
    running_here: tuple[tuple[int, int], ...] = ()  # (rank, PID) running here outside the watched tree
    # (rank, PID) a helper left by a rank that is not running, holding established TCP connections open
    leftovers: tuple[tuple[int, int], ...] = ()


NOT_PLACED = Placement()


# --- this machine -----------------------------------------------------------------------------------------


def machine_names() -> frozenset[str]:
    """This machine's hostname (and its first label) and every address of its interfaces, lower-case; never
    raises. No DNS lookup: a slow resolver must not hold a tick."""
    names: set[str] = set()
    try:
        host = socket.gethostname().lower()
        names |= {host, host.split(".")[0]}
    except OSError:
        pass
    try:
        for addresses in psutil.net_if_addrs().values():
            for address in addresses:
                if address.family in (socket.AF_INET, socket.AF_INET6):
                    names.add(address.address.split("%")[0].lower())
    except (OSError, psutil.Error):
        pass
    names.discard("")
    return frozenset(names)


def is_this_machine(address: str, names: Collection[str]) -> bool:
    """Whether an address or host name is this machine: a loopback address (127.0.0.0/8, ::1, an IPv4-mapped
    loopback), a loopback name, or one of `names` (machine_names())."""
    text = address.strip().strip("[]").split("%")[0].lower().rstrip(".")
    if not text:
        return False
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return text in LOOPBACK_NAMES or text in names
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    if ip.is_loopback or (mapped is not None and mapped.is_loopback):
        return True
    return str(ip) in names or (mapped is not None and str(mapped) in names)


def peer_host_and_port(peer: str) -> tuple[str, int | None]:
    """("127.0.0.1", 29500) from "127.0.0.1:29500", ("::ffff:127.0.0.1", 80) from "[::ffff:127.0.0.1]:80"."""
    if peer.startswith("["):
        host, _, port = peer[1:].partition("]:")
    else:
        host, _, port = peer.rpartition(":")
    return host, int_or_none(port)


def one_machine_reason(master_addr: str | None, peers: Sequence[str] | None, other_nodes: str | None,
                       names: Collection[str]) -> str | None:
    """Why every rank of the job runs on this machine, in words for a verdict ("MASTER_ADDR 127.0.0.1"); None
    when that cannot be told. `peers`: the live ranks' established TCP peers ("address:port"; None when the
    kernel's socket table could not be read); `other_nodes`: a variable that names another node."""
    if master_addr is None or other_nodes is not None or peers is None:
        return None
    if not is_this_machine(master_addr, names):
        return None
    for peer in peers:
        host, port = peer_host_and_port(peer)
        if port not in WEB_PORTS and not is_this_machine(host, names):
            return None
    loopback = master_addr.strip().lower() in LOOPBACK_NAMES or _is_loopback_ip(master_addr)
    return f"MASTER_ADDR {master_addr}" + ("" if loopback else ", this machine")


def _is_loopback_ip(text: str) -> bool:
    try:
        return ipaddress.ip_address(text.strip().strip("[]")).is_loopback
    except ValueError:
        return False


# --- the ranks on this machine outside the watched tree -----------------------------------------------------


def is_rank_itself(name: str, cmdline: Sequence[str], stat: ProcessStat, parent: ProcessStat | None, pid: int,
                   holds_connections: Callable[[], bool]) -> bool:
    """Whether a process that carries a rank's environment is that rank, not a helper it started.

    A `sleep` or shell a rank started is no Python program, and a DataLoader worker names itself pt_data_worker:
    helpers. A Python program is the rank when something started it as a program (its process group's leader, as
    a shell's job or setsid makes it, or a child of a process in its own group, as a script's is), or when it runs
    threads (a rank past init_process_group runs its backend's). What is left, one thread adopted by init or a
    subreaper outside its process group, is a forked child whose parent has ended, or a rank started in a
    subshell that has exited and not yet joined: the one holding TCP connections (`holds_connections`) is the
    helper, since a rank that has connected runs its backend's threads."""
    if name == DATALOADER_WORKER_COMM or not (is_python_command(cmdline) or name.startswith("python")):
        return False
    started_as_program = stat.pgid == pid or (parent is not None and parent.pgid == stat.pgid)
    return started_as_program or stat.threads > 1 or not holds_connections()


@dataclass(frozen=True)
class _JobKey:
    """What names one job on this machine: where its ranks meet, and how many there are."""

    master_addr: str
    master_port: str
    world_size: str

    @classmethod
    def of(cls, environ: Mapping[str, str]) -> _JobKey | None:
        addr, port, world = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT"), environ.get("WORLD_SIZE")
        return cls(addr, port, world) if addr and port and world else None


def find_ranks_here(key_environ: Mapping[str, str], unseen: Collection[int],
                    tree: Collection[int]) -> tuple[dict[int, int], dict[int, list[int]]]:
    """({rank: PID} of the unseen ranks running on this machine outside the watched `tree`, {rank: PIDs} of the
    helpers left by those that are not), for the job named by `key_environ` (a live rank's environment)."""
    key = _JobKey.of(key_environ)
    if key is None:
        return {}, {}
    running: dict[int, int] = {}
    leftovers: dict[int, list[int]] = {}
    for pid, process in sorted(node_processes().items()):
        if pid in tree:
            continue
        environ = read_environ(pid)
        rank = int_or_none(environ.get("RANK"))
        if rank is None or rank not in unseen or _JobKey.of(environ) != key:
            continue
        stat = read_process_stat(pid)
        if stat is None:
            continue
        parent = read_process_stat(process.ppid) if process.ppid > 1 else None
        if is_rank_itself(process.name, process.cmdline, stat, parent, pid,
                          functools.partial(_holds_connections, pid)):
            running.setdefault(rank, pid)
        else:
            leftovers.setdefault(rank, []).append(pid)
    return running, {rank: pids for rank, pids in leftovers.items() if rank not in running}


def _still_rank(pid: int, rank: int) -> bool:
    """Whether a process found running as `rank` still is: its environment still names that rank (an ended
    process, a zombie among them, has none to read)."""
    return int_or_none(read_environ(pid).get("RANK")) == rank


def _holds_connections(pid: int) -> bool:
    return bool(established_peers([pid]))


def established_peers(pids: Collection[int]) -> list[str] | None:
    """The peers ("address:port") of the established TCP connections of `pids`; None when the kernel's socket
    table cannot be read (sock_diag denied)."""
    inodes = set().union(*(socket_inodes(pid) for pid in pids)) if pids else set()
    sockets = read_tcp_sockets(inodes)
    if sockets is None:
        return None
    return sorted({s.peer for s in sockets if s.state == TCP_ESTABLISHED})


class Locator:
    """The placement of a job's unseen ranks, read again at most every RECHECK_S, or when the unseen ranks
    change, or a rank it found running here has ended."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: tuple[float, frozenset[int], Placement] | None = None

    def place(self, ranks: Sequence[ProcessFacts], unseen: Collection[int], tree: Collection[int]) -> Placement:
        """Where the `unseen` ranks are, from the live `ranks` of the watched `tree` (its PIDs); never raises."""
        now, wanted = self._clock(), frozenset(unseen)
        if self._last is not None and self._last[1] == wanted and now - self._last[0] < RECHECK_S and all(
                _still_rank(pid, rank) for rank, pid in self._last[2].running_here):
            return self._last[2]
        try:
            placement = self._read(ranks, wanted, tree)
        except Exception:  # a probe never raises: untold, as if nothing could be read
            placement = NOT_PLACED
        self._last = (now, wanted, placement)
        return placement

    @staticmethod
    def _read(ranks: Sequence[ProcessFacts], unseen: frozenset[int], tree: Collection[int]) -> Placement:
        live = [f for f in ranks if f.alive]
        if not live or not unseen:
            return NOT_PLACED
        environ = read_environ(live[0].pid)
        running, leftovers = find_ranks_here(environ, unseen, tree)
        reason = one_machine_reason(environ.get("MASTER_ADDR"), established_peers([f.pid for f in live]),
                                    other_nodes_named(environ), machine_names())
        # A leftover matters when it holds connections open: then the others wait for the rank instead of failing.
        holding = {rank: pid for rank, pids in leftovers.items() for pid in pids if _holds_connections(pid)}
        return Placement(one_machine=reason, running_here=tuple(sorted(running.items())),
                         leftovers=tuple(sorted(holding.items())))
