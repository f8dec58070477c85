"""The target's own progress, read from its log: iteration number, time per iteration, tokens/s.

This module finds the log and tails it; which lines say what is ``probes.logformats``' business (one
parser per framework, read through one ``LogReader`` per file), and lines no format claims are ignored quietly.
Every line is also read for a failure (``probes.logformats.failures``: a traceback's last line, CUDA out of memory, a
collective's timeout, a DataLoader worker killed, torchrun's account of a rank), and the last few are kept in
``ProgressReading.failures`` for the diagnosis to say why the job died in its own words.

The log is the training process's stdout/stderr when those are regular files (``/proc/PID/fd/1`` and ``2``), or a
path the user names. The training process is not always the one gputop was pointed at: ``log_owners`` lists, each
tick, whose log to read first — the lowest live rank of a job (rank 0 usually logs), else the training process a
launcher or shell wrapper runs (``bash -c 'python train.py > train.log'``), else the watched root — and the probe
reads the first of them whose stdout or stderr is a file, and says whose it is.

Files are tailed: the first read looks at the last 64 KiB only, later reads take what was appended since, so a
multi-gigabyte log costs nothing. Progress bars are redrawn with ``\\r``, so lines are split on ``\\r`` as well
as ``\\n``, and the newest bar (which has no terminator yet) is read too.

Time per iteration follows the one rule of ``probes.pace``: the step counter's rate over the window, from the
times successive step lines appeared (their own timestamps when they carry one, else when they reached the file:
its modification time at the read that found them, so a line is timed to its write and not to the tick), from
the first two step lines on, one counter per line format (a tokenizer's tqdm bar before the training's own step
lines is no start of theirs). What a line prints (nanoGPT's time, tqdm's rate, a time worked out from a
throughput) is the pace only until the counter has moved, and after that a cross-check, kept beside the counter's
pace where the two disagree over the window.
"""

from __future__ import annotations

import codecs
import dataclasses
import functools
import glob
import os
import re
import stat
import time
from collections import deque
from collections.abc import Sequence

from probes.frame import ROLE_MAIN, ROLE_RANK, LogFailure, ProcessSample, ProgressReading
from probes.logformats import (
    LogFormat,
    LogReader,
    ProgressLine,
    format_named,
    forms_read,
    lightning_csv,
    parse_line,
    reported_format,
    visible_text,
)
from probes.logformats.failures import LAUNCHER_KINDS, FailureReader
from probes.pace import PaceFigures, StepPace
from probes.redact import redact_argv
from probes.sensors.process_facts import is_python_command, process_cmdline, python_writes_unbuffered, read_environ

INITIAL_TAIL_BYTES = 64 * 1024
MAX_READ_BYTES = 1 << 20  # per read; a log growing faster than this per tick is skipped ahead
_LAST_LINE_CHARS = 300
_UNREAD_LINE_CHARS = 80  # the last line no format read, as quoted in the no-pace reason (one line on the screen)
# A file's modification time stands for when its newest lines arrived only within this much of the reads around
# them: a clock read over NFS from another machine, or a file touched by hand, falls back to the time of the read.
MTIME_TRUSTED_WITHIN_S = 1.0
_PYTHON_BUFFERS = "Python buffers stdout into a file: run it with -u or PYTHONUNBUFFERED=1"
# A log that has not grown for this long, written by a Python that buffers its stdout, is said to be held in the
# buffer: nanoGPT's train.py prints each iteration with a plain print(), 8 KiB of which can take minutes to fill.
BUFFERED_AFTER_S = 5.0
# The log's failure lines kept (probes/logformats/failures.py): the job's own last few, and apart from them the last few
# of a launcher's account of them (torchrun lists every rank it stopped: those never push a rank's own error out).
KEPT_FAILURES = 4
KEPT_LAUNCHER_FAILURES = 3

# (PID, who it is in words) in the order their logs are tried; who is None for the process gputop watches itself.
LogOwner = tuple[int, str | None]


def log_owners(processes: Sequence[ProcessSample], root_pid: int) -> list[LogOwner]:
    """Whose log to read, best first: the live ranks by rank (rank 0 usually logs), then the training process
    under a launcher or shell (role main), then the watched root itself."""
    ranked = [(p.rank, p) for p in processes if p.alive and p.role == ROLE_RANK and p.rank is not None]
    ranks = [p for _, p in sorted(ranked, key=lambda pair: pair[0])]
    owners: list[LogOwner] = [(p.pid, f"rank {p.rank} (PID {p.pid})") for p in ranks]
    owners += [(p.pid, f"{_program(p)} (PID {p.pid})") for p in processes
               if p.alive and p.role == ROLE_MAIN and p.pid != root_pid]
    owners.append((root_pid, None))
    return owners


def _program(sample: ProcessSample) -> str:
    return sample.name or "the training process"


@functools.lru_cache(maxsize=16)  # asked each tick while no log is found; the pipe's reader lives as long as the pipe
def _files_written_by_pipe_reader(writer_pid: int, pipe: str) -> tuple[str, str] | None:
    """(the reader's name, a regular file it has open) for the process reading the pipe `pipe` ("pipe:[1234]") that
    `writer_pid`'s stdout writes into: `tee train.log` has train.log open. None when no reader is found (another
    user's, gone) or it writes no file (less, grep to a terminal)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == writer_pid:
            continue
        try:
            if os.readlink(f"/proc/{entry.name}/fd/0") != pipe:
                continue
            # The files it opened itself (fd 3 up: tee's arguments) before its own stdout and stderr.
            fds = sorted((int(fd) for fd in os.listdir(f"/proc/{entry.name}/fd") if fd != "0"),
                         key=lambda fd: (fd < 3, fd))
            for fd in fds:
                path = f"/proc/{entry.name}/fd/{fd}"
                written = os.readlink(path)
                if stat.S_ISREG(os.stat(path).st_mode) and not written.endswith(" (deleted)"):
                    name = (open(f"/proc/{entry.name}/comm", encoding="utf-8").read().strip() or entry.name)
                    return name, written
        except (OSError, ValueError):
            continue
    return None


class _TailedFile:
    """One log file read incrementally from where the last read stopped."""

    def __init__(self, open_path: str, display: str, identity: tuple[int, int]):
        self.open_path = open_path
        self.display = display
        self.identity = identity
        self.handle = open(open_path, "rb")
        self.opened_at = time.time()
        self.size_at_open = os.fstat(self.handle.fileno()).st_size
        self.size = self.size_at_open  # as of the last read: a file that never grows may be held in a buffer
        self.modified_at = 0.0  # the file's modification time as of the last read: when its newest bytes came
        self.read_at: float | None = None  # when the last read ran
        self.lines = LogReader()  # formats that read with state keep it for this file only
        self.failures = FailureReader()  # where a traceback is open, for this file only
        self.offset: int | None = None  # None until the first read positions it near the end
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.pending = ""  # text after the last \r or \n
        self.taken_pending: str | None = None  # an unterminated bar already counted

    def close(self) -> None:
        self.handle.close()

    def read_segments(self) -> tuple[list[str], str, bool]:
        """(complete segments, unterminated tail, backlog) since the last call; backlog is True for
        the first read, whose lines were written at unknown times before the probe started."""
        info = os.fstat(self.handle.fileno())
        size = self.size = info.st_size
        self.modified_at = info.st_mtime
        backlog = self.offset is None
        start = self.offset
        skip_partial = False
        if start is None or start > size:  # first read, or the file was truncated
            start = max(0, size - INITIAL_TAIL_BYTES) if start is None else 0
            skip_partial = start > 0
            self._reset_text()
        if size - start > MAX_READ_BYTES:
            start = size - MAX_READ_BYTES
            skip_partial = True
            self._reset_text()
        self.handle.seek(start)
        data = self.handle.read(size - start)
        self.offset = start + len(data)
        text = self.pending + self.decoder.decode(data)
        segments = re.split(r"[\r\n]", text)
        self.pending = segments.pop()
        if skip_partial and segments:
            segments.pop(0)  # began mid-line
        return segments, self.pending, backlog

    def _reset_text(self) -> None:
        self.decoder.reset()
        self.pending = ""

    def arrival_time(self, now: float) -> float:
        """When the lines of the read just made (at `now`) reached the file: its modification time, the time of
        the newest write, where that lies between the read before and this one; else `now`. A step line is then
        timed to its write, not to the tick that read it (a 1 s tick is a third of a 3 s step)."""
        before, self.read_at = self.read_at, now
        if before is not None and before - MTIME_TRUSTED_WITHIN_S < self.modified_at <= now + MTIME_TRUSTED_WITHIN_S:
            return min(self.modified_at, now)
        return now


class LogProgressProbe:
    """Reads the target's progress from its log; ``read()`` never raises.

    ``reason`` says, in words a person can act on, why ``read()`` returned None.
    """

    def __init__(self, pid: int, log_path: str | None = None, tokens_per_iter: int | None = None):
        self.pid = pid
        self.log_path = log_path
        self.tokens_per_iter = tokens_per_iter if tokens_per_iter and tokens_per_iter > 0 else None
        self.reason: str | None = None
        self._files: list[_TailedFile] = []
        self._format: LogFormat | None = None
        self._formats_seen: set[LogFormat] = set()  # a format seen once may claim another's lines from then on
        self._source: str | None = None
        self._owner: LogOwner | None = None  # whose stdout/stderr the files are; None for --log
        self._iteration: int | None = None
        # The step lines and printed figures over the window (the pace's one rule), one counter per line format: a
        # data preparation's tqdm bar before litgpt's step lines counts something else, and the time between
        # them is no step. The pace is the counter of the newest step line's format.
        self._paces: dict[LogFormat, StepPace] = {}
        self._paced_format: LogFormat | None = None
        self._reported_mfu: float | None = None
        self._reported_tflops: float | None = None  # per GPU, where the log prints achieved TFLOP/s (Megatron-LM)
        self._reported_tokens: float | None = None  # the log's own tokens/s, where it prints one
        self._last_line: str | None = None
        self._last_unread: str | None = None  # the newest line no format read, as the no-pace reason quotes it
        self._last_update: float | None = None
        self._bar_total: int | None = None
        self._bar_done = False
        # Lightning's metrics.csv and its header's names, while it is the log read (_read_lightning_metrics)
        self._metrics_csv: _TailedFile | None = None
        self._metrics_columns: tuple[str, ...] = ()
        self._buffering: dict[int, bool] = {}  # PID: whether its stdout is a block-buffered Python's
        # The log's failure lines, numbered in the order read: the job's own, and a launcher's account of them.
        self._failures: deque[tuple[int, LogFailure]] = deque(maxlen=KEPT_FAILURES)
        self._launcher_failures: deque[tuple[int, LogFailure]] = deque(maxlen=KEPT_LAUNCHER_FAILURES)
        self._failures_read = 0

    def read(self, owners: Sequence[LogOwner] | None = None) -> ProgressReading | None:
        """The progress so far; ``owners`` (from ``log_owners``) says whose log to prefer this tick, and without
        it the log of the PID the probe was made for is read."""
        try:
            owners = owners or [(self.pid, None)]
            self._read_new_lines(owners)
            self._read_lightning_metrics(owners[0][0])
        except Exception as exc:
            self.reason = f"reading the log failed: {exc}"
        return self._reading()

    def close(self) -> None:
        for tailed in self._files:
            tailed.close()
        self._files = []
        if self._metrics_csv is not None:
            self._metrics_csv.close()
            self._metrics_csv = None

    # --- sources ---

    @staticmethod
    def _log_files(pid: int) -> list[tuple[str, str]]:
        """(path to open, path to show) for each of the process's stdout and stderr that is a regular file."""
        found = []
        for fd in (1, 2):
            link = f"/proc/{pid}/fd/{fd}"
            try:
                if stat.S_ISREG(os.stat(link).st_mode):
                    found.append((link, os.readlink(link)))
            except OSError:
                continue
        return found

    def _open_sources(self, owners: Sequence[LogOwner]) -> None:
        if self.log_path:
            if self._files:
                self._reopen_if_rotated(self.log_path)
            else:
                self._open([(self.log_path, self.log_path)], None)
            return
        for owner in owners:
            candidates = self._log_files(owner[0])
            if candidates:
                if owner != self._owner:
                    self._follow(owner, candidates)
                return
        if self._files:  # the owner's files stay readable after it exits: read them to their end
            return
        self.reason = self._no_log_reason(owners[0])

    def _follow(self, owner: LogOwner, candidates: list[tuple[str, str]]) -> None:
        """Read ``owner``'s log from now on; the same file under another owner (a shared stdout) keeps its place."""
        identities = set()
        for open_path, _ in candidates:
            try:
                info = os.stat(open_path)
                identities.add((info.st_dev, info.st_ino))
            except OSError:
                continue
        self._owner = owner
        if identities and identities == {tailed.identity for tailed in self._files}:
            return
        self.close()
        self._open(candidates, owner)

    def _open(self, candidates: list[tuple[str, str]], owner: LogOwner | None) -> None:
        seen = set()
        for open_path, display in candidates:
            try:
                info = os.stat(open_path)
                identity = (info.st_dev, info.st_ino)
                if identity in seen:  # 2>&1: one file, read once
                    continue
                seen.add(identity)
                self._files.append(_TailedFile(open_path, display, identity))
            except OSError as exc:
                self.reason = f"cannot read {display}: {exc.strerror or exc}"

    @staticmethod
    def _no_log_reason(owner: LogOwner) -> str:
        """Why no log can be read, in one line that says what to do."""
        pid, who = owner
        if not os.path.exists(f"/proc/{pid}"):
            return f"no process {pid}"
        try:
            target = os.readlink(f"/proc/{pid}/fd/1")
        except OSError:
            target = ""
        whose = who or f"PID {pid}"
        if target.startswith("pipe:"):  # `python train.py | tee train.log`: name the file the pipe's reader writes
            written = _files_written_by_pipe_reader(pid, target)
            where = (f" (the pipe goes to {written[0]}, which writes {written[1]}: --log {written[1]})"
                     if written else "")
            return f"no pace: the stdout of {whose} is a pipe: pass --log FILE{where}"
        kind = ("a terminal" if target.startswith(("/dev/pts", "/dev/tty"))
                else "discarded (/dev/null)" if target == "/dev/null" else "not a file")
        return (f"no pace: the job writes no step lines to a file gputop can read (the stdout of {whose}"
                f" is {kind}); --log PATH reads its log")

    def _reopen_if_rotated(self, log_path: str) -> None:
        """A --log path that now names a new file (log rotation): follow it from its start."""
        try:
            info = os.stat(log_path)
        except OSError:
            return
        current = self._files[0]
        if (info.st_dev, info.st_ino) != current.identity:
            current.close()
            fresh = _TailedFile(log_path, log_path, (info.st_dev, info.st_ino))
            fresh.offset = 0
            self._files = [fresh]

    def _read_lightning_metrics(self, pid: int) -> None:
        """Lightning's CSVLogger file, the newest ``lightning_logs/version_*/metrics.csv`` in the job's working
        directory (or one folder below it: ``CSVLogger("logs")``), while stdout and stderr show no progress (no
        bar is drawn when they are not a terminal) and no --log was named.

        Found by the process's cwd, not an open fd: CSVLogger opens the file only while a flush writes it. Its rows
        mean nothing without its header, which is reread each time: a new logged name rewrites the whole file.
        """
        if self.log_path or self._format not in (None, "lightning_csv"):
            return
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:  # gone, or not ours to read: the stdout reading has said why
            return
        found = [path for pattern in ("lightning_logs/version_*/metrics.csv", "*/lightning_logs/version_*/metrics.csv")
                 for path in glob.glob(os.path.join(glob.escape(cwd), pattern))]
        if not found:
            return
        newest = max(found, key=os.path.getmtime)
        with open(newest, encoding="utf-8", errors="replace") as handle:
            names = lightning_csv.columns(handle.readline().strip())
        if names is None:
            return
        current = self._metrics_csv
        if current is None or current.open_path != newest or names != self._metrics_columns:
            if current is not None:
                current.close()
            info = os.stat(newest)
            current = self._metrics_csv = _TailedFile(newest, newest, (info.st_dev, info.st_ino))
            self._metrics_columns = names
        segments, _, backlog = current.read_segments()  # a row is written whole with its newline
        seen_at = os.fstat(current.handle.fileno()).st_mtime if backlog else time.time()
        if backlog:  # the header names the format before a row has been flushed
            header = ",".join(names)
            self._take(header, newest, seen_at, lightning_csv.parse(header))
        for segment in segments:
            record = lightning_csv.row(names, segment.strip())
            if record is not None:
                self._take(segment, newest, seen_at, record)

    # --- reading ---

    def _read_new_lines(self, owners: Sequence[LogOwner]) -> None:
        self._open_sources(owners)
        if not self._files:
            if self.log_path and not os.path.exists(self.log_path):
                self.reason = f"log file {self.log_path} does not exist (yet)"
            return
        now = time.time()
        for tailed in self._files:
            segments, unterminated, backlog = tailed.read_segments()
            seen_at, arrived_at = now, tailed.arrival_time(now)
            if backlog:  # written before we started: the file's mtime bounds when
                seen_at = arrived_at = tailed.modified_at
            previously_taken = tailed.taken_pending
            if segments and segments[0] == previously_taken:
                segments.pop(0)  # the bar counted last time, now terminated by the next one
            for segment in segments:
                failure = tailed.failures.read(segment)
                if failure is not None:
                    self._note_failure(failure, arrived_at)
                record = tailed.lines.read(segment)
                if record is None:
                    self._note_unread(segment)
                self._take(segment, tailed.display, seen_at, record, arrived_at)
            if unterminated and unterminated != previously_taken:
                # A bar's newest state has no terminator until the next one replaces it; other lines may be
                # half-written, but then they do not parse yet and are taken once complete (read alone here, so
                # a half line never reaches a format's state).
                record = parse_line(unterminated)
                if record is not None and format_named(record.format).redraws_in_place:
                    self._take(unterminated, tailed.display, seen_at, record, arrived_at)
                    tailed.taken_pending = unterminated
        if self._iteration is None and self._format is None:
            self.reason = self._no_step_lines_reason(now)

    def _no_step_lines_reason(self, now: float) -> str:
        """Why the log read has no step line yet. Said again each read: a file that stops growing under a Python
        that buffers its stdout is a different case from one that grows with lines no format knows."""
        names = ", ".join(t.display for t in self._files)
        owner = self._owner
        buffered = owner is not None and self._buffers_stdout(owner[0])
        if buffered and owner is not None and all(t.size <= t.size_at_open for t in self._files):
            quiet_s = now - min(t.opened_at for t in self._files)
            if quiet_s >= BUFFERED_AFTER_S:
                who = owner[1] or f"PID {owner[0]}"
                # The fix first: the TUI shows this on one line and cuts its end on a narrow screen.
                return (f"no pace: {who} writes its log block-buffered (python without -u, no PYTHONUNBUFFERED): "
                        f"restart it with python -u or PYTHONUNBUFFERED=1; {names} has not grown in {quiet_s:.0f} s, "
                        "its step lines wait in Python's buffer")
        hint = f" ({_PYTHON_BUFFERS})" if buffered or self._owner is None else ""  # --log: whose it is is unknown
        seen = f'the last line, "{self._last_unread}", is' if self._last_unread is not None else "no line yet is"
        return (f"no pace: no step lines recognised yet in {names}{hint}; {seen} none of the forms gputop reads "
                f"({forms_read()}); --log PATH reads another file")

    def _note_unread(self, segment: str) -> None:
        """Keep a line no format read, shortened and with what looks secret hidden (the reason reaches snapshots)."""
        text = visible_text(segment)
        if text:
            text = " ".join(redact_argv(text.split()))
            self._last_unread = text if len(text) <= _UNREAD_LINE_CHARS else text[:_UNREAD_LINE_CHARS - 1] + "…"

    def _note_failure(self, failure: LogFailure, arrived_at: float) -> None:
        """Keep one failure line, timed to when it reached the file (the diagnosis joins it to an exit near then)."""
        kept = self._launcher_failures if failure.kind in LAUNCHER_KINDS else self._failures
        self._failures_read += 1
        kept.append((self._failures_read, dataclasses.replace(failure, logged_at=arrived_at)))

    def _failures_kept(self) -> tuple[LogFailure, ...]:
        return tuple(failure for _, failure in sorted([*self._failures, *self._launcher_failures]))

    def _buffers_stdout(self, pid: int) -> bool:
        """The process is a Python interpreter that writes stdout block-buffered into its file (read once per PID:
        neither its command line nor its environment changes)."""
        cached = self._buffering.get(pid)
        if cached is None:
            cmdline = process_cmdline(pid)
            cached = self._buffering[pid] = bool(cmdline) and is_python_command(cmdline) and \
                not python_writes_unbuffered(cmdline, read_environ(pid))
        return cached

    def _take(self, line: str, source: str, seen_at: float, record: ProgressLine | None,
              arrived_at: float | None = None) -> None:
        """Note one parsed line: seen_at is when this probe read it (the progress's last_update), arrived_at when
        it reached the file (the step counter's clock; seen_at where not known)."""
        if record is None:
            return
        if format_named(record.format).redraws_in_place and not self._is_main_bar(record):
            return
        self._formats_seen.add(record.format)
        self._format = reported_format(record.format, self._formats_seen)
        self._source = source
        self._last_line = line.strip()[:_LAST_LINE_CHARS]
        self._last_update = seen_at
        self.reason = None
        if record.reported_mfu_pct is not None:
            self._reported_mfu = record.reported_mfu_pct
        if record.reported_tflops_per_gpu is not None:
            self._reported_tflops = record.reported_tflops_per_gpu
        if record.reported_tokens_per_s is not None:
            self._reported_tokens = record.reported_tokens_per_s
        when = record.timestamp or (arrived_at if arrived_at is not None else seen_at)
        pace = self._paces.setdefault(record.format, StepPace())
        if record.seconds_per_iter is not None:
            pace.note_printed(record.seconds_per_iter, record.derived_from, when,
                              bar=format_named(record.format).redraws_in_place)
            if self._iteration is None:  # no step line yet: the printed figure is all there is
                self._paced_format = record.format
        if record.iteration is not None:
            self._iteration, self._paced_format = record.iteration, record.format
            pace.note_step(record.iteration, when)

    def _is_main_bar(self, record: ProgressLine) -> bool:
        """Keep to the training bar: an evaluation bar with another total, shown while the training bar
        is unfinished, would otherwise make the iteration jump back and forth. A bar without a total (or one
        whose iteration runs past its length, as Lightning's does) cannot be told apart and is taken."""
        if record.total is None:
            return True
        if self._bar_total is None or self._bar_done or record.total == self._bar_total:
            self._bar_total = record.total
            self._bar_done = record.iteration is not None and record.iteration >= record.total
            return True
        return False

    def _reading(self) -> ProgressReading | None:
        failures = self._failures_kept()
        if self._format is None:
            return ProgressReading(no_pace=self.reason, failures=failures) if self.reason or failures else None
        paced = self._paces.get(self._paced_format) if self._paced_format is not None else None
        pace = paced.figures() if paced is not None else PaceFigures()
        spi = pace.seconds_per_iter
        tokens_per_s = self.tokens_per_iter / spi if self.tokens_per_iter and spi else None
        return ProgressReading(
            source=self._source,
            format=self._format,
            iteration=self._iteration,
            seconds_per_iter=spi,
            tokens_per_s=tokens_per_s,
            reported_mfu_pct=self._reported_mfu,
            reported_tflops_per_gpu=self._reported_tflops,
            reported_tokens_per_s=self._reported_tokens,
            last_line=self._last_line,
            last_update=self._last_update,
            derived_from=pace.derived_from,
            printed_seconds_per_iter=pace.printed_seconds_per_iter,
            printed_from=pace.printed_from,
            log_of=self._owner[1] if self._owner is not None else None,
            failures=failures,
        )
