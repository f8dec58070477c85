"""NCCL's RAS port: the status text read from transcripts built from NCCL's format strings (tests/fixtures/nccl_ras),
and the client against a real TCP server in a thread of this test speaking the server side of the protocol as NCCL's
src/ras/client_support.cc does (the handshake, TIMEOUT, STATUS, the reply in pieces, the close that ends it)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from probes.sensors.nccl_ras import DEFAULT_ADDRESS, parse_ras_status, query_ras, ras_address

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl_ras"


def transcript(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- the parser, on each transcript ---------------------------------------------------------------------------------


def test_healthy_job_one_communicator_of_eight():
    status = parse_ras_status(transcript("healthy_8_ranks.txt"))
    assert (status.nccl_version, status.cuda_compiled, status.cuda_runtime, status.cuda_driver) == (
        "2.30.7", "12.9", 12090, 12090)
    assert (status.nodes, status.processes_per_node, status.gpus_per_process, status.processes, status.gpus) == (
        1, 8, 1, 8, 8)
    assert status.gather_s == pytest.approx(0.002)
    [group] = status.groups
    assert (group.comms, group.nodes_per_comm, group.ranks_per_node, group.ranks_per_comm, group.ranks_in_group) == (
        1, 1, "8", 8, 8)
    assert (group.status, group.errors) == ("RUNNING", ())
    assert status.communicators == ()  # NCCL names a communicator only where something is wrong
    assert status.complete and status.healthy and status.recognized
    assert status.lagging() == () and status.unparsed == ()


def test_dead_rank_named_with_its_process():
    status = parse_ras_status(transcript("dead_rank.txt"))
    assert status.dead_count == 1 and status.unresponsive_count == 0
    [process] = status.dead
    assert (process.pid, process.node, process.gpus) == (4104, "10.0.0.1", "3")
    [group] = status.groups
    assert (group.ranks_per_comm, group.ranks_in_group, group.errors) == (8, 7, ("INCOMPLETE",))
    [comm] = status.communicators
    assert (comm.label, comm.hash, comm.size, comm.problems, comm.missing_count) == (
        "#0-0", "5f2c9a1e7b3d4c80", 8, ("INCOMPLETE",), 1)
    [missing] = comm.missing
    assert missing.state == "dead"
    assert (missing.rank.rank, missing.rank.gpu, missing.rank.pid, missing.rank.node) == (3, "3", 4104, "10.0.0.1")
    assert not status.healthy and status.complete and status.unparsed == ()


def test_unresponsive_rank_and_a_rank_one_allreduce_behind():
    status = parse_ras_status(transcript("unresponsive_and_behind.txt"))
    assert status.unresponsive_count == 1 and status.dead_count == 0 and status.timeouts == 1
    assert [(p.pid, p.gpus) for p in status.unresponsive] == [(4106, "5")]
    assert status.gather_s == pytest.approx(5.013)  # RAS waited out its leg timeout on the stopped process
    [group] = status.groups
    assert group.errors == ("INCOMPLETE", "MISMATCH")
    [comm] = status.communicators
    assert comm.problems == ("INCOMPLETE", "MISMATCH")  # one communicator, under Errors and again under Warnings
    assert [(m.rank.rank, m.state) for m in comm.missing] == [(5, "unresponsive")]
    assert [(g.operation, g.count, g.n_ranks, [r.rank for r in g.ranks]) for g in comm.counts] == [
        ("AllReduce", 1234, 6, []), ("AllReduce", 1233, 1, [7])]
    [(lag_comm, lag)] = status.lagging()
    assert lag_comm is comm
    assert (lag.operation, lag.behind, lag.count, lag.lead, lag.n_ranks, lag.ranks) == (
        "AllReduce", 1, 1233, 1234, 1, (7,))
    assert not status.healthy and status.unparsed == ()


def test_single_rank_job():
    status = parse_ras_status(transcript("single_rank.txt"))
    assert (status.nodes, status.processes, status.gpus) == (1, 1, 1)
    [group] = status.groups
    assert (group.ranks_per_comm, group.status, group.errors) == (1, "RUNNING", ())
    assert status.healthy and status.gather_s == 0.0


def test_nccl_2_25_format_one_count_for_all_collectives_and_a_list_of_missing_ranks():
    status = parse_ras_status(transcript("nccl_2.25_unresponsive_and_behind.txt"))
    assert status.nccl_version == "2.25.1" and (status.nodes, status.gpus) == (4, 32)
    assert status.timeouts == 2 and status.gather_s == pytest.approx(2.05)
    [comm] = status.communicators
    assert comm.size == 32
    assert [(m.rank.rank, m.rank.pid, m.state) for m in comm.missing] == [(21, None, "missing")]
    [lag] = comm.lagging()
    assert (lag.operation, lag.behind, lag.n_ranks, lag.ranks) == ("collective", 1, 6, (0, 2, 3, 4, 5, 7))
    assert status.unparsed == ()


def test_status_and_error_groups():
    text = transcript("healthy_8_ranks.txt").replace("RUNNING      OK", "ABORT  ERROR,MISMATCH").replace(
        "Warnings\n", "#0-0 (00000000000000ab) ERROR\n"
        "  Asynchronous errors on 2 ranks\n"
        "  2 ranks reported Remote process error\n"
        "  Rank 2 -- GPU 2 managed by process 4103 on node 10.0.0.1\n"
        "  Rank 6 -- [process information not found]\n\n"
        "Warnings\n", 1) + (
        "#0-0 (00000000000000ab) MISMATCH\n"
        "  Communicator ranks have different status\n"
        "  7 ranks have status RUNNING\n"
        "  Rank 4 has status ABORT -- GPU 4 (NVML 6) managed by process 4105 on node 10.0.0.1\n\n")
    status = parse_ras_status(text)
    [comm] = status.communicators
    assert comm.problems == ("ERROR", "MISMATCH")
    [error] = comm.errors
    assert (error.phase, error.error, error.n_ranks) == ("asynchronous", "Remote process error", 2)
    assert [(r.rank, r.pid) for r in error.ranks] == [(2, 4103), (6, None)]
    assert [(s.status, s.n_ranks) for s in comm.statuses] == [("RUNNING", 7), ("ABORT", 1)]
    assert comm.statuses[1].ranks[0].gpu == "4 (NVML 6)"
    assert status.groups[0].errors == ("ERROR", "MISMATCH") and status.unparsed == ()


def test_uneven_job_summary_reads_the_totals():
    text = ("Job summary\n===========\n\n"
            "  Nodes  Processes\n          per node\n      3          8\n      1          7\n\n"
            "         Processes         GPUs\n                    per process\n               30            1\n"
            "                1            2\n\n"
            "  Nodes  Processes         GPUs\n(total)    (total)      (total)\n      4         31           32\n"
            "\nCommunicators...")
    status = parse_ras_status(text)
    assert (status.nodes, status.processes, status.gpus, status.processes_per_node) == (4, 31, 32, None)
    assert status.recognized and not status.complete and status.unparsed == ()


def test_garbage_is_not_recognized():
    status = parse_ras_status("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    assert not status.recognized and not status.complete
    assert status.unparsed == ("HTTP/1.1 400 Bad Request", "Content-Length: 0")


def test_ras_address_from_the_job_environment():
    assert ras_address({}) == DEFAULT_ADDRESS == ("localhost", 28028)
    assert ras_address({"NCCL_RAS_ADDR": "127.0.0.1:29000"}) == ("127.0.0.1", 29000)
    assert ras_address({"NCCL_RAS_ADDR": "[::1]:29001"}) == ("::1", 29001)
    assert ras_address({"NCCL_RAS_ENABLE": "0"}) is None
    assert ras_address({"NCCL_RAS_ADDR": "nonsense"}) is None


# --- the client, against a server in a thread -----------------------------------------------------------------------


def pieces(text: str) -> list[str]:
    """The reply in the messages NCCL sends it in: versions; job summary up to "Communicators..." (before it gathers
    the communicators' data); the table; Errors; Warnings."""
    cuts = [text.index("Job summary"), text.index(" (", text.index("Communicators...")), text.index("\nErrors"),
            text.index("Warnings")]
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


class RasServer:
    """A listening socket on an ephemeral port of 127.0.0.1 and a thread that serves it.

    mode: "ras" (the protocol, then `reply` in pieces, then close), "silent" (accept, never answer), "silent_first"
    (the first connection silent, the next served: another process behind the shared port), "stall" (send the
    pieces up to the table, then wait), "not_ras" (answer the handshake with something else)."""

    def __init__(self, reply: str, mode: str = "ras") -> None:
        self.reply, self.mode = reply, mode
        self.commands: list[str] = []
        self.connections = 0
        self._stop = threading.Event()
        self._held: list[socket.socket] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._listener.settimeout(0.05)
        self.address = ("127.0.0.1", self._listener.getsockname()[1])
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                continue
            self.connections += 1
            self._held.append(conn)
            if self.mode == "silent" or (self.mode == "silent_first" and self.connections == 1):
                continue
            try:
                self._session(conn)
            except OSError:
                pass

    def _session(self, conn: socket.socket) -> None:
        buffer = b""
        conn.settimeout(5)
        while not self._stop.is_set():
            chunk = conn.recv(1024)
            if not chunk:
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                command = line.decode().rstrip("\r")
                self.commands.append(command)
                lowered = command.lower()
                if lowered.startswith("client protocol "):
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\n" if self.mode == "not_ras" else b"SERVER PROTOCOL 2\n")
                elif lowered.startswith("timeout "):
                    value = command[len("timeout "):]
                    conn.sendall(b"OK\n" if value.isdigit() else f"ERROR: Invalid timeout value {value}\n".encode())
                elif lowered in ("status", "verbose status"):
                    parts = pieces(self.reply) if "Communicators..." in self.reply else [self.reply]
                    for number, part in enumerate(parts):
                        if self.mode == "stall" and number == 2:
                            self._stop.wait(10)  # gathering from a process that never answers
                            return
                        conn.sendall(part.encode())
                        time.sleep(0.01)
                    conn.close()  # how RAS ends the reply
                    return
                else:
                    conn.sendall(f"ERROR: Unknown command {command}\n".encode())

    def __enter__(self) -> RasServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self._held:
            conn.close()
        self._listener.close()


@contextmanager
def serving(reply: str, mode: str = "ras") -> Iterator[RasServer]:
    with RasServer(reply, mode) as server:
        yield server


def test_client_speaks_the_protocol_and_reads_to_the_close():
    text = transcript("unresponsive_and_behind.txt")
    with serving(text) as server:
        reading = query_ras(server.address, timeout_s=3.0)
    assert server.commands == ["CLIENT PROTOCOL 2", "TIMEOUT 1", "VERBOSE STATUS"]
    assert reading.answered and reading.reason is None and reading.server_protocol == 2
    assert reading.raw == text  # kept whole, for a recording to replay
    assert reading.status is not None and reading.status.lagging()[0][1].ranks == (7,)


def test_plain_status_and_an_explicit_ras_timeout():
    with serving(transcript("healthy_8_ranks.txt")) as server:
        reading = query_ras(server.address, timeout_s=10.0, verbose=False, ras_timeout_s=0)
    assert server.commands == ["CLIENT PROTOCOL 2", "TIMEOUT 1", "STATUS"]  # never 0: RAS would wait forever
    assert reading.status is not None and reading.status.healthy


def test_refused_port_answers_fast():
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # bound then closed: nothing listens there
    started = time.monotonic()
    reading = query_ras(("127.0.0.1", port), timeout_s=3.0)
    assert time.monotonic() - started < 0.1
    assert not reading.answered and reading.status is None
    assert reading.reason is not None and "nothing listens" in reading.reason


def test_silent_server_the_deadline_holds():
    with serving("", mode="silent") as server:
        started = time.monotonic()
        reading = query_ras(server.address, timeout_s=1.2)
        elapsed = time.monotonic() - started
    assert elapsed < 1.2 + 0.3
    assert not reading.answered and reading.reason is not None and "never answered" in reading.reason
    assert server.connections >= 2  # tried again, as ncclras does


def test_a_silent_process_then_one_that_answers():
    with serving(transcript("single_rank.txt"), mode="silent_first") as server:
        reading = query_ras(server.address, timeout_s=3.0)
    assert server.connections == 2 and reading.answered and reading.status is not None and reading.status.healthy


def test_reply_cut_at_the_deadline_keeps_what_arrived():
    with serving(transcript("unresponsive_and_behind.txt"), mode="stall") as server:
        started = time.monotonic()
        reading = query_ras(server.address, timeout_s=1.0)
        elapsed = time.monotonic() - started
    assert elapsed < 1.0 + 0.3
    assert reading.answered and reading.reason is not None and "cut" in reading.reason
    assert reading.status is not None and not reading.status.complete
    assert (reading.status.nodes, reading.status.gpus) == (1, 8)  # the job summary comes before the gathering


def test_malformed_reply_gives_a_reason():
    with serving("<html>hello</html>\n") as server:
        reading = query_ras(server.address, timeout_s=2.0)
    assert reading.answered and reading.reason is not None and "not RAS's status text" in reading.reason
    assert reading.raw == "<html>hello</html>\n"


def test_something_else_on_the_port_is_not_ras():
    with serving("", mode="not_ras") as server:
        reading = query_ras(server.address, timeout_s=2.0)
    assert not reading.answered and reading.reason is not None and "not NCCL's RAS port" in reading.reason
