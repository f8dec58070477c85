"""NCCL's own view of the job, asked of its RAS (Reliability, Availability, Serviceability) service.

NCCL 2.24 and later start a RAS thread in every process of a job (on unless NCCL_RAS_ENABLE=0). The RAS threads
watch one another over their own TCP network, and each listens for clients on localhost port 28028 (NCCL_RAS_ADDR,
"host:port", moves it; the processes of a node share the port through SO_REUSEPORT, so the kernel hands a
connection to any one of them, and each answers for the whole job). What one answers is what no reading of /proc can
give: which processes the job has lost (dead: unreachable; unresponsive: reachable but silent, e.g. stopped or
wedged), which communicator ranks are missing, and how many collective operations of each kind every rank has
launched, so that "rank 7 is one all-reduce behind the others" can be said.

The protocol (NCCL src/ras/client.cc, the `ncclras` client, and src/ras/client_support.cc, the server side) is text,
one command per line: the client sends "CLIENT PROTOCOL 2" and the server answers "SERVER PROTOCOL 2"; "TIMEOUT <s>"
(how long the RAS threads wait for each other; 0 waits forever) is answered "OK"; "STATUS" or "VERBOSE STATUS"
(more outlier ranks named) is answered with the status text, sent in pieces while RAS gathers the data from every
process, and ended by the server closing the connection. This module is the only one that talks to that port:
``query_ras`` asks, under one overall deadline, and never raises; ``parse_ras_status`` (pure) reads the text
(nccl_ras_text.py) into typed facts. The raw text is kept in the reading so that a recording can replay it.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from probes.sensors.nccl_ras_text import (
    RasCommGroup,
    RasCommunicator,
    RasCountGroup,
    RasLag,
    RasMissingRank,
    RasProcess,
    RasRank,
    RasRankErrors,
    RasStatus,
    RasStatusGroup,
    parse_ras_status,
)

__all__ = [
    "DEFAULT_ADDRESS",
    "RAS_PORT",
    "RAS_PROTOCOL",
    "RasCommGroup",
    "RasCommunicator",
    "RasCountGroup",
    "RasLag",
    "RasMissingRank",
    "RasProcess",
    "RasRank",
    "RasRankErrors",
    "RasReading",
    "RasStatus",
    "RasStatusGroup",
    "parse_ras_status",
    "query_ras",
    "ras_address",
]

RAS_PORT = 28028  # NCCL_RAS_CLIENT_PORT, src/ras/ras_internal.h
RAS_PROTOCOL = 2  # NCCL_RAS_CLIENT_PROTOCOL: 2 from NCCL 2.24 through 2.30; the server ignores the client's number
# NCCL binds getaddrinfo("localhost")'s first answer, which is ::1 on hosts whose /etc/hosts lists it first; like
# ncclras, every address "localhost" resolves to is tried.
DEFAULT_ADDRESS = ("localhost", RAS_PORT)

# How long one connection may take to be accepted: on localhost a listener accepts at once, and nothing listening
# refuses at once, so this only bounds a filtered or remote address.
CONNECT_TIMEOUT_S = 0.25
# How long the handshake may go unanswered before another connection is tried. ncclras waits 1 s, then connects
# again: the port is shared by all the job's processes on the node, and a new connection may land on a process
# whose RAS thread answers where the first (a stopped process's) never will.
HANDSHAKE_TIMEOUT_S = 0.5
# The status text of a large job is tens of kilobytes; a reply beyond this is not RAS's.
MAX_REPLY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class RasReading:
    """One question put to NCCL's RAS port, and its answer."""

    address: tuple[str, int]
    answered: bool  # a RAS thread spoke the protocol (its handshake was answered)
    status: RasStatus | None  # the reply read; None where no reply came
    raw: str  # the status text as received (all of it, or what arrived by the deadline)
    elapsed_s: float
    server_protocol: int | None = None
    reason: str | None = None  # why there is no status, or why it is partial; None when whole


def ras_address(environ: Mapping[str, str]) -> tuple[str, int] | None:
    """Where a job with this environment listens for RAS clients; None where it runs no RAS (NCCL_RAS_ENABLE=0) or
    NCCL_RAS_ADDR cannot be read (NCCL then listens nowhere: it logs the failure and goes on without a client port).

    NCCL_RAS_ADDR is "<host or IPv4>:<port>" or "[<IPv6>]:<port>" (ncclSocketGetAddrFromString, src/misc/socket.cc).
    """
    if environ.get("NCCL_RAS_ENABLE", "1").strip() == "0":
        return None
    value = environ.get("NCCL_RAS_ADDR", "").strip()
    if not value:
        return DEFAULT_ADDRESS
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


def query_ras(
    address: tuple[str, int] = DEFAULT_ADDRESS,
    timeout_s: float = 3.0,
    *,
    verbose: bool = True,
    ras_timeout_s: int | None = None,
) -> RasReading:
    """Ask the RAS thread at `address` for the job's status, all within `timeout_s`; never raises.

    Nothing listening answers at once (answered=False, a reason). A process that accepts and stays silent is tried
    again until the deadline. `ras_timeout_s` is the TIMEOUT sent: how long the RAS threads wait for one another while
    gathering (a whole second at least: 0 would make them wait forever); by default half the deadline, so that an
    unresponsive process is reported as such before the deadline cuts the reply. A reply cut by the deadline keeps
    what arrived (its job summary comes before the communicators are gathered) with answered=True and a reason.
    `verbose` sends VERBOSE STATUS: NCCL then names the ranks of larger outlier groups (under half the
    communicator rather than a quarter and at most 10).
    """
    started = time.monotonic()
    deadline = started + max(0.0, timeout_s)
    if ras_timeout_s is None:
        ras_timeout_s = max(1, math.floor(timeout_s / 2))
    ras_timeout_s = max(1, ras_timeout_s)

    def reading(answered: bool, reason: str | None, raw: str = "", status: RasStatus | None = None,
                protocol: int | None = None) -> RasReading:
        return RasReading(address, answered, status, raw, time.monotonic() - started, protocol, reason)

    def never_answered() -> RasReading:
        return reading(False, f"{_where(address)} accepted {silent} connection(s) but never answered the handshake "
                              f"within {timeout_s:.1f}s (a stopped or wedged process?)")

    silent = 0
    while True:
        sock, why = _connect(address, deadline)
        if sock is None:
            if silent:
                return never_answered()
            return reading(False, why)
        with sock:
            try:
                line = _ask(sock, f"CLIENT PROTOCOL {RAS_PROTOCOL}\n", deadline, HANDSHAKE_TIMEOUT_S)
            except TimeoutError:
                silent += 1
                if deadline - time.monotonic() > 0.05:
                    continue  # as ncclras does: connect again, perhaps to another of the node's processes
                return never_answered()
            except (OSError, ValueError) as error:
                return reading(False, f"{_where(address)}: the handshake failed: {_describe(error)}")
            if line is None or not line.upper().startswith("SERVER PROTOCOL "):
                shown = "nothing (the connection was closed)" if not line else repr(line[:80])
                return reading(False, f"{_where(address)} is not NCCL's RAS port: it answered {shown} to the "
                                      "protocol handshake")
            protocol = _leading_int(line[len("SERVER PROTOCOL "):])
            try:
                # Its answer is "OK", or an "ERROR: ..." line that is not fatal: the RAS threads then keep their
                # default wait (5 s), which the deadline still bounds.
                _ask(sock, f"TIMEOUT {ras_timeout_s}\n", deadline, None)
                sock.sendall(b"VERBOSE STATUS\n" if verbose else b"STATUS\n")
                raw, ended = _read_to_close(sock, deadline)
            except TimeoutError:
                return reading(True, f"{_where(address)} answered the handshake, then went silent", protocol=protocol)
            except (OSError, ValueError) as error:
                return reading(True, f"{_where(address)}: the status request failed: {_describe(error)}",
                               protocol=protocol)
        status = parse_ras_status(raw)
        if not status.recognized:
            return reading(True, f"{_where(address)} answered the handshake but its reply is not RAS's status text",
                           raw, status, protocol)
        if not ended or not status.complete:
            gathered = "still gathering the communicators' data" if "Communicators..." in raw else "still answering"
            why = (f"the reply was cut at the {timeout_s:.1f}s deadline: NCCL was {gathered} (a process may be "
                   "unresponsive); what arrived is kept" if not ended else
                   "the reply ended before its last section (NCCL closed the connection early)")
            return reading(True, why, raw, status, protocol)
        return reading(True, None, raw, status, protocol)


def _where(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


def _describe(error: BaseException) -> str:
    return getattr(error, "strerror", None) or str(error) or type(error).__name__


def _leading_int(text: str) -> int | None:
    digits = ""
    for char in text.strip():
        if not char.isdigit():
            break
        digits += char
    return int(digits) if digits else None


def _connect(address: tuple[str, int], deadline: float) -> tuple[socket.socket | None, str]:
    """A connected socket, or None and why, trying each address the host resolves to (as ncclras does)."""
    host, port = address
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as error:
        return None, f"cannot resolve {host}: {_describe(error)}"
    failures: list[str] = []
    for family, kind, proto, _, sockaddr in infos:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            failures.append("the deadline passed")
            break
        sock = socket.socket(family, kind, proto)
        sock.settimeout(min(CONNECT_TIMEOUT_S, remaining))
        try:
            sock.connect(sockaddr)
        except ConnectionRefusedError:
            sock.close()
            failures.append(f"{sockaddr[0]} refused")
            continue
        except OSError as error:
            sock.close()
            failures.append(f"{sockaddr[0]}: {_describe(error)}")
            continue
        return sock, ""
    if failures and all(failure.endswith("refused") for failure in failures):
        return None, (f"nothing listens on {_where(address)}: no NCCL 2.24+ job with RAS on this node (or "
                      "NCCL_RAS_ENABLE=0, or NCCL_RAS_ADDR moved it)")
    return None, f"cannot connect to {_where(address)}: {'; '.join(failures) or 'no address'}"


def _ask(sock: socket.socket, command: str, deadline: float, wait_s: float | None) -> str | None:
    """Send one command and read one reply line; None where the server closed first. TimeoutError when no whole line
    comes within `wait_s` or the deadline."""
    sock.sendall(command.encode("ascii"))
    limit = deadline if wait_s is None else min(deadline, time.monotonic() + wait_s)
    received = b""
    while b"\n" not in received:
        remaining = limit - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        sock.settimeout(remaining)
        chunk = sock.recv(1024)  # TimeoutError when nothing comes in time
        if not chunk:
            return None
        received += chunk
        if len(received) > 4096:
            raise ValueError("the reply line is too long")
    return received.split(b"\n", 1)[0].decode("utf-8", "replace").rstrip("\r")


def _read_to_close(sock: socket.socket, deadline: float) -> tuple[str, bool]:
    """Everything the server sends until it closes the connection (how RAS ends a status reply), and whether it did
    close before the deadline."""
    chunks: list[bytes] = []
    size = 0
    ended = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        if not chunk:
            ended = True
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_REPLY_BYTES:
            raise ValueError(f"the reply passed {MAX_REPLY_BYTES} bytes")
    return b"".join(chunks).decode("utf-8", "replace"), ended


# How often a job's RAS port is asked: a status gathers across every process of the job (seconds on a large one), and
# what it shows (a dead process, a rank that stays a collective behind) lasts longer than this.
RAS_EVERY_S = 10.0


class RasPoller:
    """Asks a job's RAS port from a thread of its own, every RAS_EVERY_S while wanted, so that no tick waits on a
    gathering; take() hands out each new reading once, with the Unix time it was read."""

    def __init__(self, every_s: float = RAS_EVERY_S,
                 query: Callable[[tuple[str, int]], RasReading] = query_ras) -> None:
        self._every_s = every_s
        self._query = query
        self._address: tuple[str, int] | None = None
        self._new: tuple[float, RasReading] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def want(self, address: tuple[str, int] | None) -> None:
        """Ask `address` from now on (None: stop asking); starts the thread at the first address."""
        with self._lock:
            self._address = address
        if address is not None and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gputop-nccl-ras", daemon=True)
            self._thread.start()

    def take(self) -> tuple[float, RasReading] | None:
        """The reading that came since the last call (with its Unix time), or None."""
        with self._lock:
            found, self._new = self._new, None
        return found

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                address = self._address
            if address is not None:
                reading = self._query(address)
                with self._lock:
                    self._new = (time.time(), reading)
            self._stop.wait(self._every_s)
