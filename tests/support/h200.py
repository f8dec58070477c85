"""The real H200 runs of 2026-11-26 (tests/fixtures/h200/, see its README.md) as files a test can hand to gputop.

The recordings are stored gzipped (about a tenth of their size); `recording` writes one out as the plain JSONL
that `gputop replay` reads, so the tests replay the very file the GPU machine wrote.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

H200 = Path(__file__).resolve().parent.parent / "fixtures" / "h200"


def recording(name: str, folder: Path) -> Path:
    """The recording `name` ("gpt2xl_s1", "gpt2xl_s2", "seed004_a_rec") as a plain .jsonl in `folder`."""
    path = folder / f"{name}.jsonl"
    with gzip.open(H200 / f"{name}.jsonl.gz", "rb") as packed, open(path, "wb") as plain:
        shutil.copyfileobj(packed, plain)
    return path


def fixture(name: str) -> Path:
    """A file of the runs as it is stored: a snapshot (.json), a probe result (.json) or a log (.log)."""
    return H200 / name


def remade_recording(name: str, folder: Path) -> Path:
    """The recording `name` with the header a newer gputop writes: the same frames, and the pace's resolved inputs
    (`pace_inputs`, probes/reference/pace_inputs.py) from `{name}.pace_inputs.json` beside it. The GPU machine's
    gputop wrote
    only the model's name and the tokens per iteration; that file was re-made afterwards from what its live screen
    said (see README.md), not written on that machine."""
    path = recording(name, folder)
    header, _, frames = path.read_text(encoding="utf-8").partition("\n")
    remade = json.loads(header) | {"pace_inputs": json.loads((H200 / f"{name}.pace_inputs.json").read_text())}
    path.write_text(json.dumps(remade) + "\n" + frames, encoding="utf-8")
    return path
