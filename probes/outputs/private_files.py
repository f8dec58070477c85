"""Files gputop writes that carry stacks, command lines or environments (snapshots, recordings, screenshots,
flamegraphs): created readable by their owner only (0600), whatever the umask, because a command line can
hold a token and a stack names the user's code. Every writer of such a file opens it here."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO

PRIVATE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


def open_private(path: str | Path, mode: str = "w") -> IO[str]:
    """Open `path` for text ("w" truncates, "a" appends), created 0600; an existing regular file is made 0600
    too (it is about to hold what a new one would). Devices and FIFOs (/dev/null, a pipe) are left as they are.
    Raises OSError as open() does."""
    if mode not in ("w", "a"):
        raise ValueError(f"open_private: mode {mode!r} is not 'w' or 'a'")
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "a" else os.O_TRUNC)
    fd = os.open(path, flags, PRIVATE_MODE)
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.fchmod(fd, PRIVATE_MODE)
        return os.fdopen(fd, mode, encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def write_private_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` as a 0600 file (see open_private)."""
    with open_private(path, "w") as handle:
        handle.write(text)


def make_private_dir(path: str | Path) -> Path:
    """`path` as an absolute folder, made with its missing parents where it is not there yet: the folder gputop
    makes is its owner's only (0700, whatever the umask); one that exists is left as it is. Raises OSError."""
    folder = Path(path).expanduser().absolute()
    if not folder.is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(PRIVATE_DIR_MODE, exist_ok=True)
        os.chmod(folder, PRIVATE_DIR_MODE)  # mkdir's mode went through the umask
    return folder
