"""Reading the small text files of /proc and /sys: one helper, so every probe treats a file that vanished
(a process or thread that ended, a cgroup removed) or is denied the same way: None, never an exception."""

from __future__ import annotations


def read_text(path: str) -> str | None:
    """The file's text, or None when it is gone or unreadable. Bytes that are not UTF-8 are replaced."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None
