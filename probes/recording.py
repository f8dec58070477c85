"""Recordings: frames appended to a JSONL file as they come, and read back for replay.

A recording's first line is a header (`{"schema": "gputop.recording/1", ...}`); every further line is one
Frame as `probes.frame.to_jsonable` writes it. Replay yields the same Frame objects a live engine produced,
so the TUI, snapshots and the diagnosis behave identically on both.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from probes import __version__
from probes.frame import Frame, from_jsonable, to_jsonable

RECORDING_SCHEMA = "gputop.recording/1"


class RecordingError(Exception):
    """A recording that cannot be read; the message says which file and line, for the user."""


class Recorder:
    """Appends frames to a JSONL file, flushed per frame so a crash loses at most the frame in flight."""

    def __init__(self, path: str | Path, meta: dict[str, Any] | None = None) -> None:
        self.path = Path(path)
        self._file: IO[str] = self.path.open("a", encoding="utf-8")
        if self._file.tell() == 0:
            header = {"schema": RECORDING_SCHEMA, "gputop_version": __version__, "created": time.time()}
            header.update(meta or {})
            self._write(header)

    def _write(self, obj: Any) -> None:
        self._file.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._file.flush()

    def append(self, frame: Frame) -> None:
        self._write(to_jsonable(frame))

    def close(self) -> None:
        self._file.close()


def read_recording(path: str | Path) -> Iterator[Frame]:
    """Yield the frames of a recording in order. A truncated last line (a run cut short) is skipped."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise RecordingError(f"cannot read recording {path}: {exc.strerror or exc}") from None
    if not lines:
        raise RecordingError(f"{path} is empty: not a gputop recording")
    try:
        header = json.loads(lines[0])
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or header.get("schema") != RECORDING_SCHEMA:
        raise RecordingError(f"{path} is not a gputop recording (first line lacks schema {RECORDING_SCHEMA})")
    last = len(lines) - 1
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            yield from_jsonable(Frame, json.loads(line))
        except (json.JSONDecodeError, TypeError, ValueError) as exc:
            if number - 1 == last:  # the writer was killed mid-line
                return
            raise RecordingError(f"{path}:{number}: bad frame ({exc})") from None
