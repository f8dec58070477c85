"""Recordings: frames appended to a JSONL file as they come, and read back for replay.

A recording's first line is a header (`{"schema": "gputop.recording/1", ...}`); every further line is one
Frame as `probes.frame.to_jsonable` writes it. Replay yields the same Frame objects a live engine produced,
so the TUI, snapshots and the diagnosis behave identically on both. What the live run read of the job's source for
the step facts (the lines its stacks name, torch.compile's generated code: files a replay elsewhere cannot read) rides
on the frame line where it was first needed, under `step_source` (probes/diagnosis/step_source.py), a key older
readers ignore; reading the frames back hands it to the step facts, so a replay says what the live screen said.

Both ends survive damage. Writing, a failed write (a full disk, a removed file) stops the recording but
never the monitor: `Recorder.append` returns False and `Recorder.problem` says why, in one line for the
user. Reading, a line that is not a whole frame (the writer was killed mid-line, a damaged file) is left
out and listed, so a replay shows what is whole and says what it skipped.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from probes import __version__
from probes.diagnosis import step_source
from probes.frame import Frame, from_jsonable, to_jsonable
from probes.outputs.private_files import open_private

RECORDING_SCHEMA = "gputop.recording/1"
SKIPPED_LINES_NAMED = 3  # in the notice; the rest are counted


def recording_header(meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """A recording's first line: the schema, who wrote it and when, and the writer's `meta`."""
    header = {"schema": RECORDING_SCHEMA, "gputop_version": __version__, "created": time.time()}
    header.update(meta or {})
    return header


def json_line(obj: Any) -> str:
    """One line of a recording (a header, or a frame as to_jsonable writes it), newline included."""
    return json.dumps(obj, separators=(",", ":")) + "\n"


class RecordingError(Exception):
    """A recording that cannot be read; the message says which file and line, for the user."""


class Recorder:
    """Appends frames to a JSONL file, flushed per frame so a crash loses at most the frame in flight.

    Opening raises OSError (the caller says so and stops before sampling). After that nothing raises: the
    first failed write closes the file and sets ``problem``; later appends do nothing.
    """

    def __init__(self, path: str | Path, meta: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        self.frames = 0
        self.problem: str | None = None
        self._source = step_source.SourceWriter()  # what this machine read of the job's source, carried along
        cut_short = _ends_mid_line(self.path)
        self._file: IO[str] | None = open_private(self.path, "a")  # stacks and command lines: 0600
        try:
            if cut_short:  # an earlier writer was killed mid-line: keep its cut line apart from ours
                self._file.write("\n")
            if self._file.tell() == 0:
                self._write(recording_header(meta))
            else:
                self._file.flush()
        except OSError:
            self._close_quietly()
            raise

    def _write(self, obj: Any) -> None:
        assert self._file is not None
        self._file.write(json_line(obj))
        self._file.flush()

    def append(self, frame: Frame) -> bool:
        """Append one frame; False when the recording has stopped (``problem`` says why)."""
        if self._file is None:
            return False
        try:
            line = to_jsonable(frame)
            read = self._source.new_in(frame)
            if read is not None:
                line[step_source.RECORDING_KEY] = read
            self._write(line)
        except OSError as exc:
            self.problem = (
                f"recording to {self.path} stopped after {self.frames} frames: {exc.strerror or exc}; "
                "monitoring goes on. Free space there or record elsewhere (--record PATH)"
            )
            self._close_quietly()
            return False
        self.frames += 1
        return True

    def close(self) -> None:
        if self._file is not None:
            self._close_quietly()

    def _close_quietly(self) -> None:
        file, self._file = self._file, None
        if file is None:
            return
        try:
            file.close()  # flushes: on a full disk that fails again, and the file is closed all the same
        except OSError:
            pass


def _ends_mid_line(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            if handle.tell() == 0:
                return False
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) != b"\n"
    except OSError:
        return False


@dataclass(frozen=True)
class SkippedLine:
    number: int  # 1-based line number in the file
    why: str


@dataclass(frozen=True)
class Recording:
    """A recording read whole: its frames, and the lines left out because they were not whole frames."""

    path: Path
    frames: tuple[Frame, ...]
    skipped: tuple[SkippedLine, ...] = ()

    def notice(self) -> str | None:
        """One line for the user when lines were left out, else None."""
        return skipped_notice(self.path, self.skipped, len(self.frames))


def skipped_notice(path: str | Path, skipped: list[SkippedLine] | tuple[SkippedLine, ...], whole: int) -> str | None:
    """One line for the user when lines were left out of a recording of `whole` good frames, else None."""
    if not skipped:
        return None
    named = "; ".join(f"line {s.number}: {s.why}" for s in skipped[:SKIPPED_LINES_NAMED])
    more = len(skipped) - SKIPPED_LINES_NAMED
    if more > 0:
        named += f"; and {more} more"
    what = "line that is not a whole frame" if len(skipped) == 1 else "lines that are not whole frames"
    return f"{path}: skipped {len(skipped)} {what} ({named}); showing the {whole} whole frames"


def load_recording(path: str | Path) -> Recording:
    """The whole recording at once, with what was skipped (see read_recording)."""
    skipped: list[SkippedLine] = []
    frames = tuple(read_recording(path, skipped))
    return Recording(Path(path), frames, tuple(skipped))


GZIP_MAGIC = b"\x1f\x8b"


def open_recording_text(path: str | Path) -> IO[str]:
    """A recording opened for reading as text, gzipped or not (a recording compresses about tenfold, which is how
    one goes into a bug report; gzip is told by its first two bytes, not by the name). OSError as open() raises it.

    errors="replace": a damaged line may hold bytes that are not UTF-8; it is then skipped, not fatal.
    newline="\n": a frame ends at a newline and nowhere else (the writer escapes every other control)."""
    with open(path, "rb") as probe:
        packed = probe.read(2) == GZIP_MAGIC
    if packed:
        return gzip.open(path, "rt", encoding="utf-8", errors="replace", newline="\n")
    return open(path, encoding="utf-8", errors="replace", newline="\n")


def read_header(path: str | Path) -> dict[str, Any] | None:
    """A recording's header (its first line), or None when the file cannot be read or does not start with one;
    read_recording says why when the frames are read."""
    try:
        with open_recording_text(path) as handle:
            header = json.loads(handle.readline())
    except (OSError, EOFError, json.JSONDecodeError, RecursionError):
        return None
    return header if isinstance(header, dict) and header.get("schema") == RECORDING_SCHEMA else None


def read_recording(path: str | Path, skipped: list[SkippedLine] | None = None) -> Iterator[Frame]:
    """Yield the frames of a recording in order, reading it a line at a time (an hour's recording is tens
    of megabytes; a fold over it holds only what the Monitor keeps).

    A line that is not a whole frame is left out and, when ``skipped`` is given, listed there: a last
    line cut short (the writer was killed mid-line, or its disk filled), or a damaged line anywhere.
    Raises RecordingError only when the file cannot be read or is not a gputop recording at all.
    """
    path = Path(path)
    try:
        with open_recording_text(path) as handle:
            first = handle.readline()
            if not first:
                raise RecordingError(f"{path} is empty: not a gputop recording")
            try:
                header = json.loads(first)
            except json.JSONDecodeError:
                header = None
            if not isinstance(header, dict) or header.get("schema") != RECORDING_SCHEMA:
                raise RecordingError(f"{path} is not a gputop recording (first line lacks schema {RECORDING_SCHEMA})")
            number = 1
            try:
                for number, line in enumerate(handle, start=2):
                    if not line.strip():
                        continue
                    try:
                        data = json.loads(line)
                    except (json.JSONDecodeError, RecursionError):
                        cut_short = not line.endswith("\n")  # only the last line can lack its newline
                        _skip(skipped, number, "cut short, the recording ends mid-line (its writer stopped while "
                                               "writing)" if cut_short else "not JSON")
                        continue
                    try:
                        frame = from_jsonable(Frame, data)
                    except (TypeError, ValueError, KeyError, AttributeError) as exc:
                        _skip(skipped, number, f"not a frame ({type(exc).__name__})")
                        continue
                    step_source.remember(data.get(step_source.RECORDING_KEY))  # before the frame that needs it
                    yield frame
            except EOFError:  # a gzipped recording cut short: the frames before the cut are whole
                _skip(skipped, number + 1, "cut short, the gzipped recording ends mid-stream")
    except OSError as exc:
        raise RecordingError(f"cannot read recording {path}: {exc.strerror or exc}") from None


def _skip(skipped: list[SkippedLine] | None, number: int, why: str) -> None:
    if skipped is not None:
        skipped.append(SkippedLine(number, why))
