"""probes.sensors.tcpinfo against the real kernel: loopback connections, their byte counters and silence."""

from __future__ import annotations

import os
import socket
import time

import pytest

from probes.sensors import tcpinfo
from probes.sensors.tcpinfo import (
    SOCKET_RELIST_S,
    SOCKET_RELIST_UNCHANGED_S,
    TCP_ESTABLISHED,
    SocketInodeCache,
    open_file_count,
    read_tcp_sockets,
    socket_inodes,
)


@pytest.fixture
def connection():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    yield client, accepted, server.getsockname()[1]
    for s in (client, accepted, server):
        s.close()


def test_bytes_received_and_the_peer_of_a_loopback_connection(connection):
    client, accepted, port = connection
    accepted.sendall(b"x" * 5000)
    received = 0
    while received < 5000:
        received += len(client.recv(65536))
    found = read_tcp_sockets(socket_inodes(os.getpid()))
    if found is None:
        pytest.skip("sock_diag netlink is not available here")
    client_inode = os.fstat(client.fileno()).st_ino
    mine = next(s for s in found if s.inode == client_inode)
    assert mine.state == TCP_ESTABLISHED
    assert mine.peer == f"127.0.0.1:{port}"
    assert mine.bytes_received == 5000
    assert mine.last_data_recv_s is not None and mine.last_data_recv_s < 5.0
    listening = [s for s in found if s.state != TCP_ESTABLISHED]
    assert listening  # the server socket is there too, in its own state


def test_silence_grows_and_unknown_inodes_are_ignored(connection):
    client, accepted, _ = connection
    accepted.sendall(b"y")
    client.recv(1)
    client_inode = os.fstat(client.fileno()).st_ino
    first = next(s for s in read_tcp_sockets({client_inode}) or [] if s.inode == client_inode)
    time.sleep(0.3)
    later = next(s for s in read_tcp_sockets({client_inode}) or [] if s.inode == client_inode)
    assert later.last_data_recv_s >= first.last_data_recv_s + 0.2
    assert read_tcp_sockets(set()) == []
    assert read_tcp_sockets({1}) == []  # no socket has inode 1


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_socket_inodes_are_listed_again_only_when_the_table_may_have_changed(monkeypatch):
    """The cache of a process's socket inodes: a socket opened since the last listing is seen at the next call (the
    open-file count moved; without one, within SOCKET_RELIST_S), an unchanged table is not listed again until
    SOCKET_RELIST_UNCHANGED_S, and a new process behind the same PID is listed at once."""
    listings = []
    monkeypatch.setattr(tcpinfo, "socket_inodes", lambda pid: listings.append(pid) or socket_inodes(pid))
    clock = _Clock()
    cache = SocketInodeCache(clock=clock)
    me = os.getpid()
    before = cache.inodes(me, started=1)
    assert listings == [me]
    cache.inodes(me, started=1)
    assert listings == [me]  # nothing moved: from the cache
    server = socket.create_server(("127.0.0.1", 0))
    try:
        if open_file_count(me) is None:  # a kernel before 6.2 gives no count: the slower cadence finds it
            clock.now += SOCKET_RELIST_S
        after = cache.inodes(me, started=1)
        assert os.fstat(server.fileno()).st_ino in after - before
        listed = len(listings)
        clock.now += min(SOCKET_RELIST_S, SOCKET_RELIST_UNCHANGED_S) - 0.5
        cache.inodes(me, started=1)
        assert len(listings) == listed  # unchanged and recent: not listed again
        clock.now += SOCKET_RELIST_UNCHANGED_S
        cache.inodes(me, started=1)
        assert len(listings) == listed + 1  # the latest it is listed again, whatever the count says
        cache.inodes(me, started=2)
        assert len(listings) == listed + 2  # another process now has this PID
    finally:
        server.close()
