"""The target's own progress, read from its log: iteration number, time per iteration, tokens/s.

The log is the target's stdout/stderr when those are regular files (``/proc/PID/fd/1`` and ``2``), or a
path the user names. Files are tailed: the first read looks at the last 64 KiB only, later reads take
what was appended since, so a multi-gigabyte log costs nothing. tqdm rewrites its bar with ``\\r``, so
lines are split on ``\\r`` as well as ``\\n``, and the newest bar (which has no terminator yet) is read
too.

Recognised formats (``parse_line``): nanoGPT (``iter N: loss X, time Yms, mfu Z%``), Hugging Face
Trainer's log dicts, tqdm bars (``it/s`` and ``s/it``), PyTorch Lightning's tqdm and rich bars, and a
generic ``step N ... loss X ... time Y`` line. Anything else is ignored quietly.

Time per iteration comes from the line itself when it says (nanoGPT's time, tqdm's rate, a generic
time field), otherwise from the times successive iteration lines appeared (their own timestamps when
they carry one, else when this probe first saw them).
"""

from __future__ import annotations

import ast
import codecs
import collections
import os
import re
import stat
import time
from dataclasses import dataclass, replace
from datetime import datetime

from probes.frame import ProgressReading

INITIAL_TAIL_BYTES = 64 * 1024
MAX_READ_BYTES = 1 << 20  # per read; a log growing faster than this per tick is skipped ahead
_LAST_LINE_CHARS = 300


@dataclass(frozen=True)
class ProgressLine:
    """What one log line says about progress."""

    format: str  # nanogpt, hf_trainer, tqdm, lightning, generic
    iteration: int | None = None  # Lightning: epoch × batches per epoch + batch, so it keeps growing
    total: int | None = None  # a bar's total
    seconds_per_iter: float | None = None
    loss: float | None = None
    reported_mfu_pct: float | None = None  # nanoGPT's own figure (it divides by the A100's peak)
    epoch: float | None = None
    timestamp: float | None = None  # Unix time printed on the line, if any


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"

_NANOGPT_ITER = re.compile(
    rf"\biter (\d+): loss ({_NUMBER}), time (\d+\.?\d*)ms(?:, mfu ({_NUMBER})%)?", re.IGNORECASE
)
_NANOGPT_EVAL = re.compile(rf"\bstep (\d+): train loss ({_NUMBER}), val loss ({_NUMBER})")

# tqdm: "50/1000 [00:25<07:55,  2.00it/s, loss=2.3]", "50it [00:25, 2.00it/s]", "3/10 [00:30<01:10, 10.0s/it]"
_TQDM = re.compile(
    r"(?P<n>\d+)(?:/(?P<total>\d+)|[A-Za-z]+)?\s*\[(?P<elapsed>[\d:]+)(?:<(?P<remaining>[^,\]]*))?,"
    r"\s*(?P<rate>\?|\d+\.?\d*)\s*(?P<unit>[A-Za-z]+/s|s/[A-Za-z]+)"
)
_LIGHTNING_TQDM = re.compile(r"^Epoch (?P<epoch>\d+):")
# Lightning's RichProgressBar: "Epoch 0/9  ━━━━━━━━━ 120/1000 0:00:30 • 0:03:40 3.99it/s v_num: 0 loss: 2.31"
_LIGHTNING_RICH = re.compile(
    r"^Epoch (?P<epoch>\d+)(?:/\d+)?\s+[━╸╺─\- ]*\s*(?P<n>\d+)/(?P<total>\d+)\s+[\d:]+\s*•\s*[\d:\-]+"
    r"\s+(?P<rate>\d+\.?\d*)\s*(?P<unit>it/s|s/it)"
)
_POSTFIX_LOSS = re.compile(rf"\b(?:train_)?loss(?:_step)?\s*[=:]\s*({_NUMBER})")
_NON_TRAINING_BAR = re.compile(r"^\s*(?:validation|validating|evaluat|eval\b|test|predict|sanity)",
                               re.IGNORECASE)

_GENERIC_STEP = re.compile(r"\b(?:global_step|step|iteration|iter|it|batch)\b\s*[:=#]?\s*(\d+)(?:\s*/\s*(\d+))?",
                           re.IGNORECASE)
_GENERIC_TIME = re.compile(
    r"\b(?:step_time|iter_time|batch_time|time_per_step|time|dt)\b\s*[:=]?\s*(\d+\.?\d*)\s*(ms|s|sec)?\b",
    re.IGNORECASE,
)
_GENERIC_LOSS = re.compile(rf"\bloss\b\s*[:=]?\s*({_NUMBER})", re.IGNORECASE)

_TIMESTAMP = re.compile(r"^\W{0,2}(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?")

_HF_KEYS = ("loss", "eval_loss", "learning_rate", "train_runtime", "grad_norm")


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _seconds_per_iter(rate: str, unit: str) -> float | None:
    value = _number(rate)
    if value is None or value <= 0:
        return None
    return value if unit.startswith("s/") else 1.0 / value


def _line_timestamp(line: str) -> float | None:
    match = _TIMESTAMP.match(line)
    if not match:
        return None
    try:
        when = datetime.strptime(f"{match.group(1)} {match.group(2)}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    fraction = match.group(3)
    return when.timestamp() + (int(fraction) / 10 ** len(fraction) if fraction else 0.0)


def _parse_hf_dict(line: str) -> ProgressLine | None:
    if not (line.startswith("{") and line.endswith("}")) or not any(f"'{k}'" in line for k in _HF_KEYS):
        return None
    try:
        logged = ast.literal_eval(line)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(logged, dict) or "epoch" not in logged:
        return None

    def value(key: str) -> float | None:
        raw = logged.get(key)
        return _number(str(raw)) if isinstance(raw, (int, float, str)) else None

    steps_per_second = value("train_steps_per_second")
    return ProgressLine(
        format="hf_trainer",
        loss=value("loss") if "loss" in logged else value("train_loss"),
        epoch=value("epoch"),
        seconds_per_iter=1.0 / steps_per_second if steps_per_second else None,
    )


def _parse_bar(line: str) -> ProgressLine | None:
    rich = _LIGHTNING_RICH.search(line)
    if rich:
        epoch, n, total = int(rich["epoch"]), int(rich["n"]), int(rich["total"])
        return ProgressLine("lightning", iteration=epoch * total + n, total=total, epoch=float(epoch),
                            seconds_per_iter=_seconds_per_iter(rich["rate"], rich["unit"]),
                            loss=_postfix_loss(line[rich.end():]))
    bar = _TQDM.search(line)
    if not bar:
        return None
    n = int(bar["n"])
    total = int(bar["total"]) if bar["total"] else None
    spi = _seconds_per_iter(bar["rate"], bar["unit"])
    loss = _postfix_loss(line[bar.end():])
    lightning = _LIGHTNING_TQDM.match(line)
    if lightning:
        epoch = int(lightning["epoch"])
        iteration = epoch * total + n if total else n
        return ProgressLine("lightning", iteration=iteration, total=total, epoch=float(epoch),
                            seconds_per_iter=spi, loss=loss)
    if _NON_TRAINING_BAR.match(line):
        return None
    return ProgressLine("tqdm", iteration=n, total=total, seconds_per_iter=spi, loss=loss)


def _postfix_loss(rest: str) -> float | None:
    match = _POSTFIX_LOSS.search(rest)
    return _number(match.group(1)) if match else None


def _parse_generic(line: str) -> ProgressLine | None:
    step = _GENERIC_STEP.search(line)
    if not step:
        return None
    elapsed = _GENERIC_TIME.search(line)
    loss = _GENERIC_LOSS.search(line)
    if not elapsed and not loss:  # a bare "step 5" is too common in ordinary messages to count
        return None
    spi = None
    if elapsed:
        spi = float(elapsed.group(1)) / (1000.0 if (elapsed.group(2) or "").lower() == "ms" else 1.0)
    return ProgressLine(
        "generic",
        iteration=int(step.group(1)),
        total=int(step.group(2)) if step.group(2) else None,
        seconds_per_iter=spi if spi else None,
        loss=_number(loss.group(1)) if loss else None,
    )


def parse_line(line: str) -> ProgressLine | None:
    """What one log line says about training progress, or None when it is not a progress line."""
    text = _ANSI.sub("", line).strip()
    if not text:
        return None
    parsed = _parse_known(text)
    if parsed is None:
        return None
    stamp = _line_timestamp(text)
    return replace(parsed, timestamp=stamp) if stamp is not None else parsed


def _parse_known(text: str) -> ProgressLine | None:
    nanogpt = _NANOGPT_ITER.search(text)
    if nanogpt:
        mfu = _number(nanogpt.group(4))
        return ProgressLine(
            "nanogpt",
            iteration=int(nanogpt.group(1)),
            loss=_number(nanogpt.group(2)),
            seconds_per_iter=float(nanogpt.group(3)) / 1000.0,
            reported_mfu_pct=mfu if mfu is not None and mfu >= 0 else None,  # -100% until iter 5
        )
    evaluation = _NANOGPT_EVAL.search(text)
    if evaluation:
        return ProgressLine("nanogpt", iteration=int(evaluation.group(1)), loss=_number(evaluation.group(2)))
    return _parse_hf_dict(text) or _parse_bar(text) or _parse_generic(text)


# --- tailing -----------------------------------------------------------------------------------------


class _TailedFile:
    """One log file read incrementally from where the last read stopped."""

    def __init__(self, open_path: str, display: str, identity: tuple[int, int]):
        self.open_path = open_path
        self.display = display
        self.identity = identity
        self.handle = open(open_path, "rb")
        self.offset: int | None = None  # None until the first read positions it near the end
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.pending = ""  # text after the last \r or \n
        self.taken_pending: str | None = None  # an unterminated bar already counted

    def close(self) -> None:
        self.handle.close()

    def read_segments(self) -> tuple[list[str], str, bool]:
        """(complete segments, unterminated tail, backlog) since the last call; backlog is True for
        the first read, whose lines were written at unknown times before the probe started."""
        size = os.fstat(self.handle.fileno()).st_size
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
        self._format: str | None = None
        self._hf_seen = False
        self._source: str | None = None
        self._iteration: int | None = None
        self._seconds_per_iter: float | None = None
        self._reported_mfu: float | None = None
        self._last_line: str | None = None
        self._last_update: float | None = None
        self._bar_total: int | None = None
        self._bar_done = False
        # (time, highest iteration seen at that time), one entry per distinct time
        self._sightings: collections.deque[tuple[float, int]] = collections.deque(maxlen=20)

    def read(self) -> ProgressReading | None:
        try:
            self._read_new_lines()
        except Exception as exc:
            self.reason = f"reading the log failed: {exc}"
        return self._reading()

    def close(self) -> None:
        for tailed in self._files:
            tailed.close()
        self._files = []

    # --- sources ---

    def _candidates(self) -> list[tuple[str, str]]:
        """(path to open, path to show) for each log to read."""
        if self.log_path:
            return [(self.log_path, self.log_path)]
        found = []
        for fd in (1, 2):
            link = f"/proc/{self.pid}/fd/{fd}"
            try:
                if stat.S_ISREG(os.stat(link).st_mode):
                    found.append((link, os.readlink(link)))
            except OSError:
                continue
        return found

    def _open_sources(self) -> None:
        if self.log_path and self._files:
            self._reopen_if_rotated()
        if self._files:
            return
        candidates = self._candidates()
        if not candidates:
            if self.log_path:
                return
            if not os.path.exists(f"/proc/{self.pid}"):
                self.reason = f"no process {self.pid}"
            else:
                self.reason = (f"the stdout and stderr of PID {self.pid} are not files (a terminal or a pipe); "
                               "pass --log PATH to read its log")
            return
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

    def _reopen_if_rotated(self) -> None:
        """A --log path that now names a new file (log rotation): follow it from its start."""
        try:
            info = os.stat(self.log_path)
        except OSError:
            return
        current = self._files[0]
        if (info.st_dev, info.st_ino) != current.identity:
            current.close()
            fresh = _TailedFile(self.log_path, self.log_path, (info.st_dev, info.st_ino))
            fresh.offset = 0
            self._files = [fresh]

    # --- reading ---

    def _read_new_lines(self) -> None:
        self._open_sources()
        if not self._files:
            if self.log_path and not os.path.exists(self.log_path):
                self.reason = f"log file {self.log_path} does not exist (yet)"
            return
        now = time.time()
        for tailed in self._files:
            segments, unterminated, backlog = tailed.read_segments()
            seen_at = now
            if backlog:  # written before we started: the file's mtime bounds when
                seen_at = os.fstat(tailed.handle.fileno()).st_mtime
            previously_taken = tailed.taken_pending
            if segments and segments[0] == previously_taken:
                segments.pop(0)  # the bar counted last time, now terminated by the next one
            for segment in segments:
                self._take(segment, tailed.display, seen_at)
            if unterminated and unterminated != previously_taken:
                # tqdm's newest bar has no terminator until the next one replaces it; other lines may be
                # half-written, but then they do not parse yet and are taken once complete.
                record = parse_line(unterminated)
                if record is not None and record.format in ("tqdm", "lightning"):
                    self._take(unterminated, tailed.display, seen_at, record)
                    tailed.taken_pending = unterminated
        if self._iteration is None and self._format is None and self.reason is None:
            names = ", ".join(t.display for t in self._files)
            self.reason = f"no progress lines recognised yet in {names}"

    def _take(self, line: str, source: str, seen_at: float, record: ProgressLine | None = None) -> None:
        record = record or parse_line(line)
        if record is None:
            return
        if record.format in ("tqdm", "lightning") and not self._is_main_bar(record):
            return
        if record.format == "hf_trainer":
            self._hf_seen = True
        self._format = "hf_trainer" if self._hf_seen and record.format == "tqdm" else record.format
        self._source = source
        self._last_line = line.strip()[:_LAST_LINE_CHARS]
        self._last_update = seen_at
        self.reason = None
        if record.reported_mfu_pct is not None:
            self._reported_mfu = record.reported_mfu_pct
        if record.seconds_per_iter is not None:
            self._seconds_per_iter = record.seconds_per_iter
        if record.iteration is not None:
            self._note_iteration(record.iteration, record.timestamp or seen_at,
                                 from_line=record.seconds_per_iter is not None)

    def _is_main_bar(self, record: ProgressLine) -> bool:
        """Keep to the training bar: an evaluation bar with another total, shown while the training bar
        is unfinished, would otherwise make the iteration jump back and forth."""
        if record.format == "lightning" or record.total is None:
            return True
        if self._bar_total is None or self._bar_done or record.total == self._bar_total:
            self._bar_total = record.total
            self._bar_done = record.iteration is not None and record.iteration >= record.total
            return True
        return False

    def _note_iteration(self, iteration: int, when: float, from_line: bool) -> None:
        if self._iteration is not None and iteration < self._iteration:
            self._sightings.clear()  # a new run or a bar restarting at 0
        self._iteration = iteration
        if self._sightings and self._sightings[-1][0] >= when:
            last_time, last_iteration = self._sightings[-1]
            self._sightings[-1] = (last_time, max(last_iteration, iteration))
        else:
            self._sightings.append((when, iteration))
        if not from_line and len(self._sightings) >= 2:
            (first_time, first_iteration), (last_time, last_iteration) = self._sightings[0], self._sightings[-1]
            if last_iteration > first_iteration and last_time > first_time:
                self._seconds_per_iter = (last_time - first_time) / (last_iteration - first_iteration)

    def _reading(self) -> ProgressReading | None:
        if self._format is None:
            return None
        spi = self._seconds_per_iter
        tokens_per_s = self.tokens_per_iter / spi if self.tokens_per_iter and spi else None
        return ProgressReading(
            source=self._source,
            format=self._format,
            iteration=self._iteration,
            seconds_per_iter=spi,
            tokens_per_s=tokens_per_s,
            reported_mfu_pct=self._reported_mfu,
            last_line=self._last_line,
            last_update=self._last_update,
        )
