"""Bytes moving through a process's TCP sockets, read from the kernel's sock_diag netlink interface.

Socket reads (recv) never show in /proc/PID/io, and a thread that wakes for a few microseconds per
network chunk reads as 0% CPU at the kernel's 10 ms tick, so a slow stream and a dead peer look alike
from /proc alone. The kernel keeps per-socket counters in ``struct tcp_info`` (bytes received and
acknowledged, milliseconds since data last arrived); ``ss -ti`` reads them the same way: one
SOCK_DIAG_BY_FAMILY dump per address family, matched to the process by socket inode.

This module is the only one that talks sock_diag. ``read_tcp_sockets(inodes)`` never raises: where netlink
is unavailable (no permission, an old kernel, a sandbox) it returns None and callers fall back to /proc.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Collection
from dataclasses import dataclass

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
NLMSG_ERROR = 2
NLMSG_DONE = 3
INET_DIAG_INFO = 2

_NLMSGHDR = struct.Struct("=IHHII")
# inet_diag_req_v2: family, protocol, ext, pad, states, then inet_diag_sockid (48 bytes, zero = any).
_REQ = struct.Struct("=BBBxI48x")
# inet_diag_msg: family, state, timer, retrans, sockid (sport, dport big-endian; src, dst 16 bytes each;
# interface; cookie), expires, rqueue, wqueue, uid, inode.
_MSG = struct.Struct("=BBBB2s2s16s16sI8sIIIII")
_RTATTR = struct.Struct("=HH")
# struct tcp_info (linux/tcp.h): 8 one-byte fields, then u32 fields; tcpi_last_data_recv is the 12th u32.
_LAST_DATA_RECV_OFFSET = 8 + 11 * 4
_BYTES_ACKED_OFFSET = 120  # u64 tcpi_bytes_acked (sent and acknowledged), kernel 4.1+
_BYTES_RECEIVED_OFFSET = 128  # u64 tcpi_bytes_received, kernel 4.1+
TCP_ESTABLISHED = 1
_ALL_STATES = 0xFFFFFFFF


@dataclass(frozen=True)
class TcpSocket:
    """One TCP socket of the process, as the kernel counts it."""

    inode: int
    peer: str  # "address:port"
    state: int  # TCP state (1 = established)
    bytes_received: int | None
    bytes_acked: int | None  # bytes sent and acknowledged by the peer
    last_data_recv_s: float | None  # seconds since data last arrived on it


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets PID holds open (from /proc/PID/fd); empty when unreadable or none."""
    inodes: set[int] = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for name in names:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue  # closed between listing and reading
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    return inodes


def open_file_count(pid: int) -> int | None:
    """How many files PID holds open, from the size of /proc/PID/fd (Linux 6.2+); None where the kernel reports 0
    (older kernels do for every process), or the process is gone or unreadable."""
    try:
        return os.stat(f"/proc/{pid}/fd").st_size or None
    except OSError:
        return None


# Without an open-file count to say when a process's table changed, its sockets are listed again this often.
SOCKET_RELIST_S = 5.0
# With the count, a table whose count holds still is listed again this often anyway: a socket closed and another
# opened between two ticks keeps the count.
SOCKET_RELIST_UNCHANGED_S = 15.0


@dataclass
class _ListedSockets:
    started: int | None  # the process's start time: with the PID it names one process
    open_files: int | None
    listed_at: float
    inodes: set[int]


class SocketInodeCache:
    """Each process's socket inodes, listed again only when its table may have changed.

    Listing them reads every entry of /proc/PID/fd (a torch rank or DataLoader worker holds 30-60: on a node's job
    of 73 processes, thousands of readlinks a tick, most of gputop's own cost). A table is listed again when the
    process is new (PID and start time), when its open-file count moved, and at the latest every
    SOCKET_RELIST_UNCHANGED_S; where the kernel gives no count, every SOCKET_RELIST_S.
    """

    def __init__(self, clock=None) -> None:
        self._clock = clock or time.monotonic
        self._listed: dict[int, _ListedSockets] = {}

    def inodes(self, pid: int, started: int | None) -> set[int]:
        now = self._clock()
        open_files = open_file_count(pid)
        listed = self._listed.get(pid)
        if listed is not None and listed.started == started:
            age = now - listed.listed_at
            if open_files is not None and open_files == listed.open_files and age < SOCKET_RELIST_UNCHANGED_S:
                return listed.inodes
            if open_files is None and listed.open_files is None and age < SOCKET_RELIST_S:
                return listed.inodes
        inodes = socket_inodes(pid)
        self._listed[pid] = _ListedSockets(started, open_files, now, inodes)
        return inodes

    def keep_only(self, pids) -> None:
        """Forget the processes not in `pids` (ended, or left the tree)."""
        wanted = set(pids)
        for pid in [p for p in self._listed if p not in wanted]:
            del self._listed[pid]


def read_tcp_sockets(inodes: Collection[int]) -> list[TcpSocket] | None:
    """The TCP sockets among `inodes`, with their counters; None when sock_diag cannot be read."""
    if not inodes:
        return []
    wanted = set(inodes)
    found: list[TcpSocket] = []
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as nl:
            nl.settimeout(1.0)
            for family in (socket.AF_INET, socket.AF_INET6):
                found.extend(_dump(nl, family, wanted))
    except (OSError, struct.error, ValueError):
        return None
    return found


def _dump(nl: socket.socket, family: int, wanted: set[int]) -> list[TcpSocket]:
    request = _REQ.pack(family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), _ALL_STATES)
    header = _NLMSGHDR.pack(_NLMSGHDR.size + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
    nl.send(header + request)
    found: list[TcpSocket] = []
    while True:
        data = nl.recv(1 << 16)
        offset = 0
        while offset + _NLMSGHDR.size <= len(data):
            length, kind, _, _, _ = _NLMSGHDR.unpack_from(data, offset)
            if length < _NLMSGHDR.size:
                return found
            if kind == NLMSG_DONE:
                return found
            if kind == NLMSG_ERROR:
                raise OSError("sock_diag answered with an error")
            body = data[offset + _NLMSGHDR.size: offset + length]
            parsed = _parse(body, wanted)
            if parsed is not None:
                found.append(parsed)
            offset += (length + 3) & ~3


def _parse(body: bytes, wanted: set[int]) -> TcpSocket | None:
    if len(body) < _MSG.size:
        return None
    family, state, _, _, _sport, dport, _src, dst, _, _, _, _, _, _, inode = _MSG.unpack_from(body)
    if inode not in wanted:
        return None
    received = acked = last_recv = None
    offset = _MSG.size
    while offset + _RTATTR.size <= len(body):
        length, kind = _RTATTR.unpack_from(body, offset)
        if length < _RTATTR.size:
            break
        if kind == INET_DIAG_INFO:
            info = body[offset + _RTATTR.size: offset + length]
            if len(info) >= _LAST_DATA_RECV_OFFSET + 4:
                last_recv = struct.unpack_from("=I", info, _LAST_DATA_RECV_OFFSET)[0] / 1000.0
            if len(info) >= _BYTES_RECEIVED_OFFSET + 8:
                acked = struct.unpack_from("=Q", info, _BYTES_ACKED_OFFSET)[0]
                received = struct.unpack_from("=Q", info, _BYTES_RECEIVED_OFFSET)[0]
        offset += (length + 3) & ~3
    address_bytes = dst[:4] if family == socket.AF_INET else dst
    address = socket.inet_ntop(family, address_bytes)
    port = struct.unpack("!H", dport)[0]
    peer = f"[{address}]:{port}" if family == socket.AF_INET6 else f"{address}:{port}"
    return TcpSocket(inode=inode, peer=peer, state=state, bytes_received=received, bytes_acked=acked,
                     last_data_recv_s=last_recv)
