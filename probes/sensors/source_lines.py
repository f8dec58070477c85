"""The Python source a job runs, read from this machine's disk, for the step facts (probes/diagnosis/step_facts.py):
the line py-spy names in a sampled stack, the `with` statements around it, and the code torch.compile generated.

Only files a sampled stack names are read; only regular files under MAX_FILE_BYTES; nothing is imported or executed,
and what is read is kept (a bounded least-recently-used table: each file is read once). A replay on another machine
finds none of the job's files, and the facts read from them are then unknown, never guessed. A file edited since the
job ran is read as it is now: a line is used only where the function around it is the one py-spy named, so a line
that moved is not read as another function's. Never raises: a file gone or unreadable is None.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

from probes.lru import LruCache

# A source file a person writes is far smaller; the table of lines holds at most _CACHED_FILES of these.
MAX_FILE_BYTES = 4 * 2**20
_CACHED_FILES = 64
# The code Inductor generates for a large model's graph runs to megabytes: read whole, once, and not kept here (its
# reader keeps what it found in it).
MAX_GENERATED_BYTES = 64 * 2**20
_DEF = re.compile(r"(?:async\s+)?def\s+(\w+)\s*\(|class\s+(\w+)\b")
_WITH = re.compile(r"(?:async\s+)?with\b")


@dataclass(frozen=True)
class _Read:
    """One file as read (lines None where it could not be)."""

    lines: tuple[str, ...] | None


_files: LruCache[str, _Read] = LruCache(_CACHED_FILES)


def file_text(path: str, limit: int = MAX_GENERATED_BYTES) -> str | None:
    """The whole text of the Python file `path`, read now (not kept), or None where it is not a regular .py file
    of at most `limit` bytes that can be read here."""
    if not path.startswith("/") or not path.endswith(".py"):
        return None  # "<string>", "<frozen importlib._bootstrap>", a native library
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None  # never a FIFO or a device that would block, never a huge file
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(limit)
    except (OSError, ValueError):
        return None


def _read(path: str) -> _Read:
    text = file_text(path, MAX_FILE_BYTES)
    return _Read(tuple(text.splitlines()) if text is not None else None)


def file_lines(path: str) -> tuple[str, ...] | None:
    """The lines of `path` (kept once read), or None where it is not a readable Python file here."""
    return _files.get_or_build(path, lambda: _read(path)).lines


def readable(path: str) -> bool:
    return file_lines(path) is not None


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


def _code(text: str) -> bool:
    stripped = text.strip()
    return bool(stripped) and not stripped.startswith("#")


def _headers(lines: tuple[str, ...], index: int) -> list[tuple[int, str]]:
    """The block headers around line `index` (0-based), innermost first: each line above it indented less than
    everything between, up to the first def or class."""
    found: list[tuple[int, str]] = []
    level = _indent(lines[index])
    for above in range(index - 1, -1, -1):
        text = lines[above]
        if not _code(text) or _indent(text) >= level or text.lstrip()[0] in ")]}":
            continue  # blank, a comment, deeper, or the closing bracket of a signature written over several lines
        level = _indent(text)
        found.append((above, text.strip()))
        if _DEF.match(text.strip()):
            break
    return found


def _function_matches(headers: list[tuple[int, str]], function: str) -> bool:
    """The def around the line is the one py-spy named: "Class.method" or "main" (3.11+ qualnames, or bare names
    before), "<module>" outside any def. Names py-spy gives no def for (<lambda>, <listcomp>) are not checked."""
    name = function.rsplit(".", 1)[-1]
    enclosing = next((_DEF.match(text) for _, text in headers if _DEF.match(text)), None)
    if name == "<module>":
        return enclosing is None
    if name.startswith("<"):
        return True
    return enclosing is not None and enclosing.group(1) == name


def line_in(path: str, line: int, function: str) -> str | None:
    """The text of `path`'s line `line` (1-based), stripped, where the function around it is `function`; else
    None (file not here, line out of range, or the file changed under it)."""
    lines = file_lines(path)
    if lines is None or not 1 <= line <= len(lines):
        return None
    if not _function_matches(_headers(lines, line - 1), function):
        return None
    return lines[line - 1].strip()


def previous_code_line(path: str, line: int) -> str | None:
    """The nearest line of code above `path`'s line `line`, stripped (None where there is none or no file)."""
    lines = file_lines(path)
    if lines is None or not 1 <= line <= len(lines):
        return None
    return next((lines[i].strip() for i in range(line - 2, -1, -1) if _code(lines[i])), None)


def enclosing_withs(path: str, line: int, function: str) -> tuple[tuple[int, str], ...]:
    """The `with` statements (1-based line, text) that enclose `path`'s line `line` inside `function`, innermost
    first; none where the file is not here or its function around the line is not `function`."""
    lines = file_lines(path)
    if lines is None or not 1 <= line <= len(lines):
        return ()
    headers = _headers(lines, line - 1)
    if not _function_matches(headers, function):
        return ()
    return tuple((index + 1, text) for index, text in headers if _WITH.match(text))
