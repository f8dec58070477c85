"""Saving what the screen shows (`s`): the snapshot JSON (probes.outputs.snapshot, schema gputop.snapshot/2) and
an SVG screenshot beside it, named after the target's PID and the time of the latest reading, in gputop's own
folder (snapshots_dir: never the current folder, which may be a clone that would collect untracked files)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from probes.frame import Frame
from probes.outputs import make_private_dir, write_json_atomic, write_private_text


def snapshots_dir() -> Path:
    """Where `s` saves: $XDG_STATE_HOME/gputop, else ~/.local/state/gputop (the XDG base directories' state
    folder, for what a program keeps between runs that is not its configuration)."""
    state = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state"  # a relative one is ignored
    return base / "gputop"


@dataclass(frozen=True)
class SavedSnapshot:
    json_path: Path
    svg_path: Path


def snapshot_stem(frames: Sequence[Frame], directory: Path) -> str:
    """gputop-PID-YYYYmmdd-HHMMSS, with -2, -3, ... when a save in the same second already exists."""
    latest = frames[-1]
    stem = f"gputop-{latest.target.pid}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(latest.time))}"
    candidate, number = stem, 1
    while (directory / f"{candidate}.json").exists() or (directory / f"{candidate}.svg").exists():
        number += 1
        candidate = f"{stem}-{number}"
    return candidate


def save_snapshot(frames: Sequence[Frame], document: dict, screenshot_svg: str,
                  directory: str | Path) -> SavedSnapshot:
    """Write the snapshot document (the monitor's) and the screenshot into `directory` (made, 0700, where it is
    missing), named after the latest of `frames`; raises OSError when it cannot (the caller says so on screen)."""
    directory = make_private_dir(directory)
    stem = snapshot_stem(frames, directory)
    json_path = directory / f"{stem}.json"
    svg_path = directory / f"{stem}.svg"
    write_json_atomic(document, str(json_path))
    write_private_text(svg_path, screenshot_svg)  # the screen shows stacks and command lines: 0600
    return SavedSnapshot(json_path=json_path, svg_path=svg_path)
