"""Which log lines say why the job, a rank or a worker failed, in the job's own words: one module for failure lines,
beside the formats' step lines, read through one ``FailureReader`` per log file as ``LogReader`` reads step lines.

What it recognises, each from the code that prints it (tests/unit/test_log_failures.py quotes the real lines):

- a Python traceback's last line, ``SomeError: message``, taken once the traceback is complete (the first line after
  its frames, never a frame); each rank's own where ``init_process_group`` prefixes them with ``[rank0]: ``
  (torch/distributed/distributed_c10d.py's excepthook);
- CUDA out of memory, ``torch.OutOfMemoryError: CUDA out of memory. Tried to allocate …``
  (c10/cuda/CUDACachingAllocator.cpp);
- NCCL's watchdog, ``Watchdog caught collective operation timeout: WorkNCCL(SeqNum=…, OpType=ALLREDUCE, …) ran for
  600000 milliseconds before timing out.`` (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp), and ``NCCL error …``
  (NCCLUtils.hpp's C10D_NCCL_CHECK);
- gloo's timeout, ``Timed out waiting 10000ms for recv operation to complete`` (gloo/transport/tcp/unbound_buffer.cc),
  ``Read timeout [addr]``, and a lost peer, ``Connection closed by peer [addr]``, ``Read error [addr]: Connection reset
  by peer`` (gloo/transport/tcp/pair.cc);
- a DataLoader worker's death, ``DataLoader worker (pid 57) is killed by signal: Killed.`` (torch/csrc/DataLoader.cpp)
  and ``DataLoader worker (pid(s) 57) exited unexpectedly`` (torch/utils/data/dataloader.py);
- torchrun's account of a rank: ``failed (exitcode: 1) local_rank: 0 (pid: 7405) of binary: …``
  (torch/distributed/elastic/multiprocessing/api.py), its failure table's ``rank : 1 (local_rank: 1)`` /
  ``exitcode : -9 (pid: 1234)``, ``Signal 9 (SIGKILL) received by PID 1234`` and its own ``ChildFailedError``
  (torch/distributed/elastic/multiprocessing/errors/__init__.py).

Each recognised line gives a LogFailure (probes/frame.py): its kind, the line shortened and with what looks secret
hidden (as the log probe's other lines), and the rank, PID, signal and exit status it prints. Cheap on lines that are
none of these: a substring check comes before any pattern. Pure: no I/O; the reader keeps only where a traceback or
torchrun's table is.
"""

from __future__ import annotations

import re
import signal
from dataclasses import replace

from probes.frame import FailureKind, LogFailure
from probes.redact import redact_argv

# The launcher's account of the job's processes (torchrun's log and failure table, its ChildFailedError), not the
# job's own words: a rank's own error says more, and a launcher lists every rank it stopped.
LAUNCHER_KINDS: tuple[FailureKind, ...] = ("rank_failed", "launcher_failed")
FAILURE_LINE_CHARS = 240  # a failure's line as kept: room for an exception and its message, one line on a wide screen
# A traceback whose last line never comes (a process killed while printing it) stops being one after this many lines.
TRACEBACK_MAX_LINES = 1000

# Some substring of every line a pattern below reads: a line with none of them is no failure (and costs no regex).
_MARKERS = ("Traceback", "rror", "out of memory", "exited unexpectedly", "killed by signal", "exitcode",
            "received by PID", "Timed out waiting", "timeout", "closed by peer", "Socket closed", "local_rank",
            "NCCL")
# A process's tag before its line: init_process_group's excepthook ("[rank0]: "), torchrun --tee's "[default0]:"
# (role and local rank), srun --label's "0: " (the task).
_PREFIX = re.compile(r"^(?:\[(rank|[A-Za-z_]\w*?)(\d+)\]:|(\d+): )\s?")
# A C++ (glog) or torchrun's logging header: "[E1207 11:46:02.297000 7401 torch/…/ProcessGroupNCCL.cpp:563] ".
_LOG_HEADER = re.compile(r"^\[?[IWEF]\d{4} [\d:.]+ (?:\d+ )?\S+:\d+\]\s*")
# A source location as C++ errors print it, "[/__w/pytorch/pytorch/third_party/gloo/…/unbound_buffer.cc:78]": its
# file name is enough.
_SOURCE_PATH = re.compile(r"\[(?:[^\[\]\s]*/)([^/\[\]\s]+:\d+)\]")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # a terminal's escapes (colours), as probes.logformats drops them
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*)(?::(?:\s(.*))?)?$")
_EXCEPTION_WORDS = ("Error", "Exception", "Interrupt", "Exit", "Iteration", "Failure", "Empty")

_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")
_NCCL_TIMEOUT = re.compile(r"Watchdog caught collective operation timeout")
_NCCL_ERROR = re.compile(r"NCCL (?:error|Error)|NCCL communicator was aborted|nccl(?:Unhandled|System|Internal|"
                         r"InvalidUsage|Remote)\w*Error")
_GLOO_TIMEOUT = re.compile(r"Timed out waiting \d+ms for (?:recv|send) operation to complete"
                           r"|\b(?:Read|Write) timeout \[")
_GLOO_PEER = re.compile(r"Connection closed by peer \[|\bRead error \[|\bSocket (?:unexpectedly )?closed \[")
_WORKER_KILLED = re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal: ([^.]+)\.")
_WORKER_EXITED = re.compile(r"DataLoader worker \(pid(?:\(s\))? (\d+)(?:, [\d, ]+)?\) exited unexpectedly"
                            r"(?: with exit code (\d+))?")
_TORCHRUN_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
_TABLE_RANK = re.compile(r"^rank\s*: (\d+) \(local_rank: \d+\)")
_TABLE_EXITCODE = re.compile(r"^exitcode\s*: (-?\d+) \(pid: (\d+)\)")
_SIGNAL_RECEIVED = re.compile(r"Signal (\d+) \(SIG\w+\) received by PID (\d+)")
# NCCL's log prefix: "[Rank 3] ", "[PG ID 0 PG GUID 0(default_pg) Rank 3] "
_RANK_IN_LINE = re.compile(r"\bRank (\d+)\]")

# strsignal()'s words (glibc), as the DataLoader prints a worker's signal: "is killed by signal: Killed."
_SIGNAL_WORDS: dict[str, int] = {words: int(number) for words, number in (
    ("Hangup", signal.SIGHUP), ("Interrupt", signal.SIGINT), ("Quit", signal.SIGQUIT),
    ("Illegal instruction", signal.SIGILL), ("Aborted", signal.SIGABRT), ("Bus error", signal.SIGBUS),
    ("Floating point exception", signal.SIGFPE), ("Killed", signal.SIGKILL), ("Segmentation fault", signal.SIGSEGV),
    ("Broken pipe", signal.SIGPIPE), ("Terminated", signal.SIGTERM), ("User defined signal 1", signal.SIGUSR1),
    ("User defined signal 2", signal.SIGUSR2))}


class FailureReader:
    """Reads one log's lines in the order they were written; ``read(line)`` answers the LogFailure a line says, or
    None. A traceback's frames say nothing: its last line does, once it comes. The same failure said again on the
    next failure line (NCCL's watchdog logs it, then throws it: the same kind of the same rank) is said once; two
    exceptions in a row are two unless their lines are the same."""

    def __init__(self) -> None:
        self._open: dict[str, int] = {}  # a process's tag ("" untagged): lines read inside its open traceback
        self._table_rank: int | None = None  # torchrun's failure table: the rank of the entry being read
        self._last: LogFailure | None = None

    def read(self, line: str) -> LogFailure | None:
        if not self._open and not any(marker in line for marker in _MARKERS):
            return None
        text = _ANSI.sub("", line).rstrip()  # its indentation kept: a traceback's frames are indented
        prefix = _PREFIX.match(text)
        tag, rank = "", None
        if prefix is not None:
            tag, text = prefix.group(0).strip(), text[prefix.end():]
            number = prefix.group(2) or prefix.group(3)
            rank = int(number) if prefix.group(1) in ("rank", None) else None
        if tag in self._open:
            return self._in_traceback(tag, text, rank)
        text = text.strip()
        if text.startswith("Traceback (most recent call last):"):
            self._open[tag] = 0
            return None
        return self._say(_classify(text, rank, self._table(text)))

    def _in_traceback(self, tag: str, text: str, rank: int | None) -> LogFailure | None:
        """A line of `tag`'s open traceback: a frame (indented) or nothing yet, or its last line."""
        self._open[tag] += 1
        if self._open[tag] > TRACEBACK_MAX_LINES:
            del self._open[tag]
            return None
        if not text or text[0].isspace() or text.startswith("Traceback (most recent call last):"):
            return None
        match = _EXCEPTION.match(text)
        if match is None or not (match.group(2) is not None or "." in match.group(1)
                                 or match.group(1).endswith(_EXCEPTION_WORDS)):
            return None  # another process's line amid the traceback: its last line is still to come
        del self._open[tag]
        found = _classify(text, rank, None)
        if found is None:
            kind: FailureKind = "launcher_failed" if match.group(1).endswith("ChildFailedError") else "exception"
            found = LogFailure(kind, _shown(text), rank=rank)
        return self._say(found)

    def _table(self, text: str) -> int | None:
        """torchrun's failure table: the rank of the entry its "rank : N (local_rank: M)" row opened."""
        stripped = text.strip()
        row = _TABLE_RANK.match(stripped)
        if row is not None:
            self._table_rank = int(row.group(1))
        elif stripped.startswith(("=====", "[")) or "FAILED" in stripped:
            self._table_rank = None  # the table's border, the next entry's "[1]:", its title
        return self._table_rank

    def _say(self, found: LogFailure | None) -> LogFailure | None:
        if found is None:
            return None
        if self._last is not None and (self._last == found or (found.kind != "exception" and
                                       replace(self._last, text="") == replace(found, text=""))):
            return None  # the same failure again (the watchdog's log line, then its exception)
        self._last = found
        return found


def read_failures(lines: list[str]) -> list[LogFailure]:
    """The failures a log's lines say, in order (one reader over them all)."""
    reader = FailureReader()
    return [found for line in lines if (found := reader.read(line)) is not None]


def _classify(text: str, rank: int | None, table_rank: int | None) -> LogFailure | None:
    """The failure one line says outside a traceback's frames (a traceback's last line included), or None."""
    stripped = text.strip()
    if stripped.startswith("traceback :"):
        return None  # torchrun's table repeats the exitcode row's signal ("Signal 9 (SIGKILL) received by PID")
    if (row := _TABLE_EXITCODE.match(stripped)) is not None:
        return _rank_exit(text, table_rank, int(row.group(2)), int(row.group(1)))
    if (failed := _TORCHRUN_FAILED.search(text)) is not None:
        return _rank_exit(text, None, int(failed.group(3)), int(failed.group(1)))
    if (received := _SIGNAL_RECEIVED.search(text)) is not None:
        return LogFailure("rank_failed", _shown(text), rank=rank, pid=int(received.group(2)),
                          signal=int(received.group(1)))
    if (killed := _WORKER_KILLED.search(text)) is not None:
        return LogFailure("worker_killed", _shown(text), rank=rank, pid=int(killed.group(1)),
                          signal=_SIGNAL_WORDS.get(killed.group(2).strip()))
    if (exited := _WORKER_EXITED.search(text)) is not None:
        code = int(exited.group(2)) if exited.group(2) is not None else None
        return LogFailure("worker_exited", _shown(text), rank=rank, pid=int(exited.group(1)), exit_code=code)
    kind: FailureKind | None = None
    if _OOM.search(text):
        kind = "cuda_oom"
    elif _NCCL_TIMEOUT.search(text):
        kind = "nccl_timeout"
    elif _GLOO_TIMEOUT.search(text):
        kind = "gloo_timeout"
    elif _GLOO_PEER.search(text):
        kind = "gloo_peer_lost"
    elif _NCCL_ERROR.search(text):
        kind = "nccl_error"
    if kind is None:
        return None
    if rank is None and (named := _RANK_IN_LINE.search(text)) is not None:
        rank = int(named.group(1))
    return LogFailure(kind, _shown(text), rank=rank)


def _rank_exit(text: str, rank: int | None, pid: int, code: int) -> LogFailure:
    """torchrun's word on a rank: its exit code, negative for the signal that ended it."""
    return LogFailure("rank_failed", _shown(text), rank=rank, pid=pid, signal=-code if code < 0 else None,
                      exit_code=code if code >= 0 else None)


def _shown(text: str) -> str:
    """The line as kept: no log header, source paths cut to their file, secrets hidden, one line of at most
    FAILURE_LINE_CHARS."""
    text = _SOURCE_PATH.sub(r"[\1]", _LOG_HEADER.sub("", text.strip()))
    text = " ".join(redact_argv(text.split()))
    return text if len(text) <= FAILURE_LINE_CHARS else text[:FAILURE_LINE_CHARS - 1] + "…"
