"""PyTorch's Flight Recorder, read from outside the job: the last collective each rank entered and completed.

This module owns every way into a rank's Flight Recorder (torch.distributed's ring buffer of recent
collectives, on when the rank's environment sets TORCH_FR_BUFFER_SIZE or TORCH_NCCL_TRACE_BUFFER_SIZE):

- the worker server (torch.distributed.elastic.control_plane.worker_main() with TORCH_WORKER_SERVER_SOCKET=PATH):
  an HTTP server on a Unix socket in the rank; POST /handler/fr_trace_json returns the buffer as JSON. Works on
  gloo and CPU (checked with torch 2.13). gputop asks it only what the job chose to serve: it writes no file.
- dump files (TORCH_FR_DUMP_TEMP_FILE / TORCH_NCCL_DEBUG_INFO_TEMP_FILE, prefix + rank): the pickle NCCL's
  watchdog writes on a timeout (the format torch.distributed.flight_recorder's fr_trace reads). gloo writes none
  (checked: a gloo timeout in torch 2.13 dumps nothing). Unpickled with a loader that builds only plain
  containers, so a dump cannot run code in gputop.
- the debug-info pipe (TORCH_NCCL_DEBUG_INFO_PIPE_FILE, NCCL only): writing to it makes the rank dump to its
  dump file. gputop writes it only when the user asks (--fr-dump, or `f` in the TUI: request_dump), once per
  rank and per request, never blocking, and says what it asked of which rank (CollectivesReading.asks); otherwise
  it only says the trigger exists (RankCollectives.trigger). On that request a rank with a worker server is read
  at once instead, and nothing is written.

Not read: torch.distributed.debug.start_debug_server(). Its per-rank worker servers listen on ephemeral TCP
ports that only the job's TCPStore names (nothing in a rank's environment does; trying a rank's listening
ports could hit gloo's own listener), and its frontend on rank 0 needs aiohttp or requests and answers HTML.

Never raises: a rank whose recorder cannot be read carries the reason, and a rank whose environment shows no
recorder is left out.
"""

from __future__ import annotations

import errno
import io
import json
import math
import os
import pickle
import socket
import stat
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from probes.frame import (
    ROLE_MAIN,
    ROLE_RANK,
    CollectiveRecord,
    CollectivesReading,
    FlightRecorderAsk,
    GroupCollectives,
    ProcessSample,
    RankCollectives,
)
from probes.sensors.process_facts import int_or_none, read_environ, start_ticks
from probes.sensors.textfiles import read_text

BUFFER_VARIABLES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")  # the first set wins, as in torch
SOCKET_VARIABLE = "TORCH_WORKER_SERVER_SOCKET"
DUMP_VARIABLES = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
PIPE_VARIABLE = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"
NCCL_DEFAULT_DUMP_PREFIX = "/tmp/nccl_trace_rank_"  # ProcessGroupNCCL's default TORCH_NCCL_DEBUG_INFO_TEMP_FILE
# torch 2.13 records with 2000 entries when no buffer variable is set (FlightRecorder.hpp: getCvarInt(
# {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}, 2000)): a rank that sets only the pipe has one.
TORCH_DEFAULT_BUFFER_SIZE = 2000
# How often ProcessGroupNCCL's heartbeat monitor reads the pipe (see write_dump_pipe): every
# TORCH_NCCL_COORD_CHECK_MILSEC (default 1000) while TORCH_NCCL_DUMP_ON_TIMEOUT is on (the default), else every
# TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC (default 480).
NCCL_COORD_CHECK_DEFAULT_MS = 1000
NCCL_HEARTBEAT_TIMEOUT_DEFAULT_S = 480
# After the rank's next read of its pipe, how long its dump (written asynchronously) may take to appear.
DUMP_WAIT_S = 20.0

# A dump costs the rank a serialisation of its buffer: ask each rank at most this often, and keep the last
# answer in between (its read_at says how old it is).
READ_INTERVAL_S = 3.0
SOCKET_TIMEOUT_S = 1.0
MAX_ANSWER_BYTES = 16 * 1024 * 1024  # TORCH_FR_BUFFER_SIZE=20000 entries of JSON fit several times over
PENDING_KEPT = 4  # entered-not-completed collectives kept per group: the oldest is the one waited in

# Bytes per element of the dtypes the recorder names (c10's ScalarType names).
DTYPE_BYTES = {
    "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Char": 1, "Byte": 1,
    "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "ComplexHalf": 4, "UInt16": 2, "UInt32": 4,
    "UInt64": 8, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1,
}


@dataclass(frozen=True)
class FlightRecorderSource:
    """What a rank's environment says about its Flight Recorder and the ways to read it."""

    buffer_size: int | None  # entries; None or 0: not recording
    socket_path: str | None  # the worker server's Unix socket
    dump_prefix: str | None  # dump files are PREFIX + rank
    pipe_prefix: str | None  # NCCL's trigger pipe is PREFIX + rank + ".pipe"
    pipe_poll_s: float = NCCL_COORD_CHECK_DEFAULT_MS / 1000  # how often the rank reads that pipe

    @property
    def recording(self) -> bool:
        return bool(self.buffer_size)


def find_source(environ: Mapping[str, str]) -> FlightRecorderSource | None:
    """The recorder a rank's environment shows; None when it shows neither a recorder nor a worker server."""
    named = next((name for name in BUFFER_VARIABLES if name in environ), None)
    buffer_size = int_or_none(environ[named]) if named else None
    socket_path = environ.get(SOCKET_VARIABLE) or None
    dump_prefix = next((environ[name] for name in DUMP_VARIABLES if environ.get(name)), None)
    pipe_prefix = environ.get(PIPE_VARIABLE) or None
    if named is None and pipe_prefix is not None:
        buffer_size = TORCH_DEFAULT_BUFFER_SIZE  # the pipe alone: torch records by default
    if not buffer_size and socket_path is None:
        return None
    if dump_prefix is None and buffer_size:
        dump_prefix = NCCL_DEFAULT_DUMP_PREFIX  # where NCCL's watchdog dumps when the job names no file
    return FlightRecorderSource(buffer_size, socket_path, dump_prefix, pipe_prefix, _pipe_poll_s(environ))


def _pipe_poll_s(environ: Mapping[str, str]) -> float:
    if environ.get("TORCH_NCCL_DUMP_ON_TIMEOUT", "1").strip().lower() in ("0", "false", "no", "off"):
        return float(int_or_none(environ.get("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "")) or
                     NCCL_HEARTBEAT_TIMEOUT_DEFAULT_S)
    return (int_or_none(environ.get("TORCH_NCCL_COORD_CHECK_MILSEC", "")) or NCCL_COORD_CHECK_DEFAULT_MS) / 1000


# --- the worker server -----------------------------------------------------------------------------------


class WorkerServerError(Exception):
    """The worker server could not be asked, or answered something other than 200; the message says which."""


def ask_worker_server(path: str, handler: str, timeout_s: float = SOCKET_TIMEOUT_S) -> str:
    """POST /handler/HANDLER to torch's worker server on the Unix socket PATH; the answer's body.

    Raises WorkerServerError (the one exception of this module, caught by read_rank)."""
    request = (f"POST /handler/{handler} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n"
               "Connection: close\r\n\r\n").encode()
    chunks, size = [], 0
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout_s)
            conn.connect(path)
            conn.sendall(request)
            while chunk := conn.recv(65536):
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise WorkerServerError(f"its answer is over {MAX_ANSWER_BYTES // 2**20} MiB")
    except TimeoutError as exc:
        raise WorkerServerError(f"no answer within {timeout_s:g} s") from exc
    except OSError as exc:
        raise WorkerServerError(exc.strerror or str(exc)) from exc
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode("latin-1", "replace")
    parts = status.split()
    if len(parts) < 2 or parts[1] != "200":
        raise WorkerServerError(f"it answered {status or 'nothing'}: {body[:120].decode('utf-8', 'replace')}")
    return body.decode("utf-8", "replace")


def listening_socket_owner(path: str, pid: int) -> bool | None:
    """Whether PID holds the listening Unix socket bound at PATH (True/False); None when no listening socket
    is bound there. Ranks that share one TORCH_WORKER_SERVER_SOCKET path would otherwise be mistaken for
    each other: the recorder's answer names no rank."""
    table = read_text("/proc/net/unix") or ""
    inodes = set()
    for line in table.splitlines()[1:]:
        fields = line.split()
        # Num RefCount Protocol Flags Type St Inode Path; flag 0x10000 (__SO_ACCEPTCON): listening
        if len(fields) >= 8 and fields[7] == path and int(fields[3], 16) & 0x10000:
            inodes.add(fields[6])
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in descriptors:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                return True
        except OSError:  # closed since the listing
            continue
    return False


# --- the recorder's records --------------------------------------------------------------------------------


def _input_bytes(sizes, dtypes) -> int | None:
    try:
        total = 0
        for shape, dtype in zip(sizes, dtypes, strict=True):
            width = DTYPE_BYTES.get(str(dtype))
            if width is None:
                return None
            total += math.prod(int(n) for n in shape) * width
        return total
    except (TypeError, ValueError):
        return None


def _record(entry: Mapping) -> CollectiveRecord:
    backend, _, op = str(entry.get("profiling_name") or "?").rpartition(":")
    created = entry.get("time_created_ns")
    completed = bool(entry.get("retired")) or entry.get("state") == "completed"
    return CollectiveRecord(
        seq=int(entry.get("collective_seq_id") or 0), op=op, backend=backend or None,
        input_bytes=_input_bytes(entry.get("input_sizes") or (), entry.get("input_dtypes") or ()),
        entered_at=created / 1e9 if isinstance(created, (int, float)) and created > 0 else None,
        completed=completed)


def _status_number(status: Mapping, key: str) -> int | None:
    number = int_or_none(str(status.get(key))) if status.get(key) is not None else None
    return number if number is not None and number >= 0 else None


def _highest(*numbers: int | None) -> int | None:
    known = [n for n in numbers if n is not None]
    return max(known) if known else None


def parse_trace(dump: Mapping) -> tuple[GroupCollectives, ...]:
    """Each process group's position from a Flight Recorder dump (the dict of fr_trace_json or of a pickle
    dump: entries, pg_status, ...). Point-to-point entries (collective_seq_id 0) are left out.

    A group's last entered/completed collective is the highest of what its entries and pg_status say: on
    gloo, pg_status's last_completed_collective lags the entries' retired flags (seen: 3 while 4 and 5 were
    retired)."""
    groups: dict[str, dict] = {}
    entries = dump.get("entries") or ()
    for entry in entries if isinstance(entries, (list, tuple)) else ():
        if not isinstance(entry, Mapping) or entry.get("is_p2p") or not entry.get("collective_seq_id"):
            continue
        process_group: Sequence[Any] = entry.get("process_group") or ()
        name = str(process_group[0]) if len(process_group) > 0 else str(entry.get("pg_id", "?"))
        desc = str(process_group[1]) if len(process_group) > 1 else None
        group = groups.setdefault(name, {"desc": desc, "records": []})
        group["records"].append(_record(entry))
    statuses = dump.get("pg_status") or {}
    statuses = statuses if isinstance(statuses, Mapping) else {}
    for name in statuses:
        groups.setdefault(str(name), {"desc": None, "records": []})
    result = []
    for name, group in groups.items():
        records = sorted(group["records"], key=lambda r: r.seq)
        found = statuses.get(name)
        status: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        entered = _highest(records[-1].seq if records else None, _status_number(status, "last_enqueued_collective"))
        completed = _highest(max((r.seq for r in records if r.completed), default=None),
                             _status_number(status, "last_completed_collective"))
        pending = tuple(r for r in records if not r.completed and (completed is None or r.seq > completed))
        result.append(GroupCollectives(pg_id=name, pg_name=group["desc"], last_entered=entered,
                                       last_completed=completed, pending=pending[:PENDING_KEPT],
                                       last=records[-1] if records else None))
    return tuple(sorted(result, key=lambda g: (len(g.pg_id), g.pg_id)))


class _PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings and numbers only: a dump file is the job's, not gputop's to trust."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"a dump may hold only plain values, not {module}.{name}")


def load_dump(path: str) -> dict:
    """A Flight Recorder dump file (pickle, as NCCL's watchdog writes it; JSON when the job chose JSON).

    Raises OSError, ValueError or pickle.UnpicklingError (caught by read_rank)."""
    with open(path, "rb") as handle:
        data = handle.read(MAX_ANSWER_BYTES + 1)
    if len(data) > MAX_ANSWER_BYTES:
        raise ValueError(f"over {MAX_ANSWER_BYTES // 2**20} MiB")
    if data[:1] in (b"{", b"["):
        dump = json.loads(data)
    else:
        dump = _PlainUnpickler(io.BytesIO(data)).load()
    if not isinstance(dump, dict):
        raise ValueError("not a Flight Recorder dump (no dict at its top)")
    return dump


def trigger_text(source: FlightRecorderSource, rank: int | None) -> str | None:
    """The dump on demand the job enabled for this rank, in words; None when it enabled none."""
    pipe = pipe_path(source, rank)
    return f"write to {pipe} (NCCL: the rank then dumps to {source.dump_prefix}{rank})" if pipe else None


def read_rank(pid: int, rank: int | None, source: FlightRecorderSource, started_at: float | None = None,
              now: float | None = None, socket_is_its_own: bool = False) -> RankCollectives:
    """One rank's recorder, through the first way that answers: its worker server, else a dump file it wrote
    since it started. socket_is_its_own: the socket was found to be this rank's before (skips reading
    /proc/net/unix again). Never raises."""
    now = time.time() if now is None else now
    trigger = trigger_text(source, rank)
    reasons = []
    if source.socket_path:
        owner = True if socket_is_its_own else listening_socket_owner(source.socket_path, pid)
        if owner is None:
            reasons.append(f"nothing listens on {source.socket_path} yet (the rank has not entered worker_main())")
        elif not owner:
            reasons.append(f"{source.socket_path} is another process's socket (the ranks share one "
                           f"{SOCKET_VARIABLE} path: give each rank its own)")
        else:
            try:
                body = ask_worker_server(source.socket_path, "fr_trace_json")
                dump = json.loads(body)
                if not isinstance(dump, dict):
                    raise ValueError("not a JSON object")
                return RankCollectives(rank=rank, pid=pid, source="worker_server", path=source.socket_path,
                                       available=True, groups=parse_trace(dump), read_at=now, trigger=trigger)
            except (WorkerServerError, ValueError) as exc:
                reasons.append(f"the worker server at {source.socket_path}: {exc}")
    if source.dump_prefix and rank is not None:
        path = f"{source.dump_prefix}{rank}"
        try:
            written = os.stat(path).st_mtime
        except OSError:
            written = None
        if written is not None and (started_at is None or written >= started_at):
            try:
                dump = load_dump(path)
                return RankCollectives(rank=rank, pid=pid, source="dump_file", path=path, available=True,
                                       groups=parse_trace(dump), read_at=written, trigger=trigger)
            except (OSError, ValueError, EOFError, pickle.UnpicklingError) as exc:
                reasons.append(f"the dump {path} could not be read: {exc}")
    if not reasons:
        if source.recording:
            reasons.append(f"recording ({source.buffer_size} entries) but not readable from outside: set "
                           f"{SOCKET_VARIABLE} per rank and wrap its main in worker_main(), or, with NCCL, wait "
                           "for the dump on timeout")
        else:
            reasons.append("the worker server answers, but the Flight Recorder is off: set TORCH_FR_BUFFER_SIZE")
    return RankCollectives(rank=rank, pid=pid, source="none", available=False, reason="; ".join(reasons),
                           trigger=trigger)


# --- a dump on demand: NCCL's debug-info pipe, written only when the user asks ----------------------------


def pipe_path(source: FlightRecorderSource, rank: int | None) -> str | None:
    """The rank's pipe, PREFIX + global rank + ".pipe"; None when the job set no pipe or the rank is unknown."""
    return f"{source.pipe_prefix}{rank}.pipe" if source.pipe_prefix and rank is not None else None


def write_dump_pipe(path: str) -> str | None:
    """Writes one byte to NCCL's debug-info pipe at PATH, never blocking and never creating a file; None when
    written, else why not (one line).

    The protocol, from ProcessGroupNCCL (torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp, struct DumpPipe, and
    ProcessGroupNCCL.cpp, HeartbeatMonitor::runLoop, pytorch/pytorch; the same in torch 2.13's installed header):
    when TORCH_NCCL_DEBUG_INFO_PIPE_FILE is set and the trace buffer is on, the heartbeat monitor thread of the
    process group with uid 0 unlinks PREFIX<global rank>.pipe, mkfifo()s it 0666 and opens it
    O_RDONLY|O_NONBLOCK; each pass of its loop (every TORCH_NCCL_COORD_CHECK_MILSEC, 1000 ms by default, while
    TORCH_NCCL_DUMP_ON_TIMEOUT is on, else every TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC) read()s up to 128 bytes, and
    any byte read starts dumpDebuggingInfo() asynchronously: the Flight Recorder pickled to DebugInfoWriter's
    file, TORCH_FR_DUMP_TEMP_FILE / TORCH_NCCL_DEBUG_INFO_TEMP_FILE (default /tmp/nccl_trace_rank_) + global
    rank. The job keeps training. One byte is one dump: what is written is never parsed.

    A FIFO opened O_WRONLY|O_NONBLOCK with no reader fails with ENXIO (open(2)) instead of waiting for one: the
    rank is gone or its process group is not up; a full pipe (EAGAIN) means earlier requests are still unread."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)  # no O_CREAT: a missing pipe stays missing
    except FileNotFoundError:
        return (f"there is no pipe at {path}: the rank has not made it (only an NCCL process group does, once "
                "initialised; gloo never does)")
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return (f"no process reads {path} (ENXIO): the rank's NCCL process group is not up, or the rank is "
                    "gone; nothing was written")
        return f"{path} could not be opened: {exc.strerror or exc}"
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):  # never write into a regular file that took the pipe's name
            return f"{path} is not a pipe (FIFO): nothing was written"
        os.write(fd, b"1")
    except BlockingIOError:
        return f"{path} is full: earlier requests are still unread (the rank is not reading its pipe)"
    except OSError as exc:
        return f"{path} could not be written: {exc.strerror or exc}"
    finally:
        os.close(fd)
    return None


def _who(rank: int | None, pid: int) -> str:
    return f"rank {rank} (PID {pid})" if rank is not None else f"PID {pid}"


NO_TRIGGER_FIX = (f"set {PIPE_VARIABLE}=DIR/fr_pipe_ in the ranks' environment (NCCL: each rank then reads "
                  f"DIR/fr_pipe_<rank>.pipe and dumps when gputop writes it), or {SOCKET_VARIABLE} per rank with "
                  "its main in torch.distributed.elastic.control_plane.worker_main() (any backend, gloo included: "
                  "read-only, nothing dumps)")


@dataclass
class _AwaitedDump:
    """A dump asked of a rank through its pipe, not yet read."""

    rank: int
    path: str  # the dump file it will write
    asked_at: float  # Unix time
    deadline: float  # monotonic
    # The dump file's mtime when asked (None: none yet): a newer one is the answer. Compared with itself, not
    # with asked_at: file times come from the kernel's coarse clock, a few ms behind time.time().
    mtime_before: float | None


# --- the probe -------------------------------------------------------------------------------------------


class FlightRecorderProbe:
    """Reads the Flight Recorder of each training process (rank, or the main process) whose environment shows
    one; each rank at most every READ_INTERVAL_S, its last reading kept in between. Read-only, except on the
    user's request_dump()."""

    def __init__(self, read_interval_s: float = READ_INTERVAL_S, dump_wait_s: float = DUMP_WAIT_S) -> None:
        self._read_interval_s = read_interval_s
        self._dump_wait_s = dump_wait_s
        self._sources: dict[int, FlightRecorderSource | None] = {}  # by PID: environments do not change
        self._env_ranks: dict[int, int | None] = {}  # by PID: RANK, for a process watched alone (no rank given)
        self._last: dict[int, tuple[float, RankCollectives]] = {}  # by PID: monotonic time read, reading
        self._dump_requested = threading.Event()  # set from the UI thread, taken by the next read()
        self._awaited: dict[int, _AwaitedDump] = {}  # by PID: dumps asked through a pipe, not yet read

    def request_dump(self) -> None:
        """At the next read: ask each training process for a Flight Recorder dump where its job enabled a way
        (a worker server is read at once, NCCL's pipe is written once), and say for the others what to set."""
        self._dump_requested.set()

    def awaited_lines(self) -> list[str]:
        """The dumps asked for that have not come yet, one line each (said when a headless run ends first)."""
        return [f"rank {a.rank}'s dump ({a.path}) had not come {time.time() - a.asked_at:.0f} s after it was asked"
                for a in self._awaited.values()]

    def read(self, processes: Iterable[ProcessSample]) -> CollectivesReading | None:
        """None when no training process shows a recorder or a worker server and no dump was asked."""
        ranks, asks = [], []
        live = [p for p in processes if p.alive and p.state != "zombie" and p.role in (ROLE_RANK, ROLE_MAIN)]
        requested = self._dump_requested.is_set()
        if requested:
            self._dump_requested.clear()
            if not live:
                asks.append(FlightRecorderAsk(None, None, "not_asked", "asked no Flight Recorder dump: no training "
                                              "process (rank or main process) is in the watched tree", at=time.time()))
        for sample in sorted(live, key=lambda p: (p.rank is None, p.rank, p.pid)):
            source = self._source(sample.pid)
            rank = sample.rank if sample.rank is not None else self._env_ranks.get(sample.pid)
            if requested:
                ask, reading = self._ask(sample.pid, rank, source)
                asks.append(ask)
                if reading is not None:
                    self._last[sample.pid] = (time.monotonic(), reading)
                    ranks.append(reading)
                    continue
            if source is None:
                continue
            arrived = self._awaited_dump(sample, source) if sample.pid in self._awaited else None
            if arrived is not None:
                ask, reading = arrived
                asks.append(ask)
                if reading is not None:
                    self._last[sample.pid] = (time.monotonic(), reading)
                    ranks.append(reading)
                    continue
            kept = self._last.get(sample.pid)
            if kept is not None and time.monotonic() - kept[0] < self._read_interval_s:
                ranks.append(kept[1])
                continue
            own = kept is not None and kept[1].source == "worker_server"  # a socket's owner does not change
            reading = read_rank(sample.pid, rank, source, _start_time(sample.pid), socket_is_its_own=own)
            self._last[sample.pid] = (time.monotonic(), reading)
            ranks.append(reading)
        alive = {p.pid for p in live}
        for cache in (self._last, self._sources, self._awaited, self._env_ranks):
            for pid in [pid for pid in cache if pid not in alive]:
                del cache[pid]
        if not ranks and not asks:
            return None
        return CollectivesReading(ranks=tuple(sorted(ranks, key=lambda r: (r.rank is None, r.rank, r.pid))),
                                  asks=tuple(asks))

    def _ask(self, pid: int, rank: int | None, source: FlightRecorderSource | None
             ) -> tuple[FlightRecorderAsk, RankCollectives | None]:
        """The user asked for a dump: what was done about this process, and its reading when read at once."""
        now = time.time()
        who = _who(rank, pid)
        if source is None:
            return FlightRecorderAsk(rank, pid, "not_asked", f"asked {who} nothing: its environment enables no "
                                     f"Flight Recorder dump on demand; {NO_TRIGGER_FIX}", at=now), None
        tried = ""
        if source.socket_path:
            kept = self._last.get(pid)
            reading = read_rank(pid, rank, source, _start_time(pid), now=now,
                                socket_is_its_own=kept is not None and kept[1].source == "worker_server")
            if reading.available and reading.source == "worker_server":
                return FlightRecorderAsk(rank, pid, "read_now", f"read {who}'s Flight Recorder now through its "
                                         f"worker server at {source.socket_path} (read-only: no dump asked)",
                                         path=source.socket_path, at=now), reading
            tried = f"its worker server did not answer ({reading.reason}); "
        pipe = pipe_path(source, rank)
        if pipe is None or rank is None:  # no pipe is named for a rank not known
            why = ("its rank is unknown, so its pipe cannot be named" if source.pipe_prefix else
                   f"its job enabled no dump on demand; {NO_TRIGGER_FIX}")
            return FlightRecorderAsk(rank, pid, "not_asked", f"asked {who} nothing: {tried}{why}", at=now), None
        dump = f"{source.dump_prefix or NCCL_DEFAULT_DUMP_PREFIX}{rank}"
        mtime_before = _mtime(dump)  # before the write: the rank may dump at once
        problem = write_dump_pipe(pipe)
        if problem is not None:
            return FlightRecorderAsk(rank, pid, "not_asked", f"could not ask {who} for a Flight Recorder dump: "
                                     f"{tried}{problem}", path=pipe, at=now), None
        self._awaited[pid] = _AwaitedDump(rank, dump, now, time.monotonic() + source.pipe_poll_s + self._dump_wait_s,
                                          mtime_before)
        return FlightRecorderAsk(rank, pid, "pipe_written", f"asked {who} to dump its Flight Recorder through "
                                 f"{pipe} (it reads the pipe every {source.pipe_poll_s:g} s and writes {dump})",
                                 path=pipe, at=now), None

    def _awaited_dump(self, sample: ProcessSample, source: FlightRecorderSource
                      ) -> tuple[FlightRecorderAsk, RankCollectives | None] | None:
        """The dump asked of this rank, once written since it was asked (read then, not at the next scheduled
        read); a line when none came in time; None while it may still come."""
        awaited = self._awaited[sample.pid]
        who = _who(awaited.rank, sample.pid)
        written = _mtime(awaited.path)
        if written is not None and (awaited.mtime_before is None or written > awaited.mtime_before):
            try:
                dump = load_dump(awaited.path)
            except (OSError, ValueError, EOFError, pickle.UnpicklingError):
                dump = None  # read while the rank still writes it: try again next tick, until the deadline
            if dump is not None:
                del self._awaited[sample.pid]
                reading = RankCollectives(rank=awaited.rank, pid=sample.pid, source="dump_file", path=awaited.path,
                                          available=True, groups=parse_trace(dump), read_at=written,
                                          trigger=trigger_text(source, awaited.rank))
                after = max(0.0, written - awaited.asked_at)
                line = f"{who} dumped its Flight Recorder to {awaited.path} {after:.1f} s after it was asked; read"
                return FlightRecorderAsk(awaited.rank, sample.pid, "dumped", line, path=awaited.path,
                                         at=time.time()), reading
        if time.monotonic() < awaited.deadline:
            return None
        del self._awaited[sample.pid]
        line = (f"{who} wrote no dump to {awaited.path} within {time.time() - awaited.asked_at:.0f} s of being asked "
                "(its NCCL heartbeat monitor reads the pipe; the rank's log says \"Dump signal received through "
                "pipe\" when it did)")
        return FlightRecorderAsk(awaited.rank, sample.pid, "no_dump", line, path=awaited.path, at=time.time()), None

    def _source(self, pid: int) -> FlightRecorderSource | None:
        if pid not in self._sources:
            environ = read_environ(pid)
            self._sources[pid] = find_source(environ)
            self._env_ranks[pid] = int_or_none(environ.get("RANK"))
        return self._sources[pid]


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _start_time(pid: int) -> float | None:
    """The process's start, Unix time: a dump file older than it is a previous run's."""
    ticks = start_ticks(pid)
    uptime = read_text("/proc/uptime")
    if ticks is None or not uptime:
        return None
    try:
        return time.time() - float(uptime.split()[0]) + ticks / os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return None
