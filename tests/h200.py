"""The real H200 runs of 2026-11-26 (tests/fixtures/h200/, see its README.md) as files a test can hand to gputop.

The recordings are stored gzipped (about a tenth of their size); `recording` writes one out as the plain JSONL
that `gputop replay` reads, so the tests replay the very file the GPU machine wrote.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

H200 = Path(__file__).parent / "fixtures" / "h200"


def recording(name: str, folder: Path) -> Path:
    """The recording `name` ("gpt2xl_s1", "gpt2xl_s2", "seed004_a_rec") as a plain .jsonl in `folder`."""
    path = folder / f"{name}.jsonl"
    with gzip.open(H200 / f"{name}.jsonl.gz", "rb") as packed, open(path, "wb") as plain:
        shutil.copyfileobj(packed, plain)
    return path


def fixture(name: str) -> Path:
    """A file of the runs as it is stored: a snapshot (.json), a probe result (.json) or a log (.log)."""
    return H200 / name
