"""The Textual app driven in-process by a Pilot: running an async test without a plugin, the recorded frames of
tests/fixtures/recordings, an engine that hands them out one per tick (RecordedEngine), and what a test reads back
from the screen (a table's rows, the hot functions, the notifications, any renderable as text).

RecordedEngine stands in for probes.monitoring.engine.Engine on the live path (the sampling worker thread,
FrameArrived messages, pause, recording, a failing probe), where the real engine would read /proc, NVML and py-spy.
"""

from __future__ import annotations

import asyncio
import functools
import io
import threading
from pathlib import Path

from rich.console import Console
from textual.widgets import DataTable

from probes.monitoring.engine import EngineConfig
from probes.outputs.recording import read_recording
from tui.app import GputopApp

RECORDINGS = Path(__file__).resolve().parent.parent / "fixtures" / "recordings"


def pilot_test(test):
    """Run an async Pilot test with asyncio (no async pytest plugin needed)."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        return asyncio.run(test(*args, **kwargs))

    return run


def frames_of(name: str):
    return list(read_recording(RECORDINGS / f"{name}.jsonl"))


class RecordedEngine:
    """Stands in for probes.monitoring.engine.Engine: each tick() returns the next recorded frame (the last one again
    once they run out). `hold_first` makes the first tick wait, to catch the screen before any data."""

    def __init__(self, frames, *, interval_s: float = 0.25, fail_with: Exception | None = None,
                 hold_first: threading.Event | None = None) -> None:
        self.frames = frames
        self.pid = frames[0].target.pid
        self.config = EngineConfig(interval_s=interval_s)
        self.ticks = 0
        self.fail_with = fail_with
        self.hold_first = hold_first

    def tick(self):
        if self.hold_first is not None and self.ticks == 0:
            self.hold_first.wait(10)
        if self.fail_with is not None and self.ticks >= 1:
            raise self.fail_with
        frame = self.frames[min(self.ticks, len(self.frames) - 1)]
        self.ticks += 1
        return frame


def text_of(renderable, width: int = 200) -> str:
    console = Console(width=width, file=io.StringIO(), record=True)
    console.print(renderable)
    return console.export_text()


def table_rows(app: GputopApp, table_id: str) -> list[list[str]]:
    table = app.query_one(f"#{table_id}", DataTable)
    return [[getattr(cell, "plain", str(cell)) for cell in table.get_row_at(i)] for i in range(table.row_count)]


def hot_functions(app: GputopApp) -> list[str]:
    return [row[2] for row in table_rows(app, "hot")]


def capture_notes(app: GputopApp) -> list[str]:
    notes: list[str] = []
    app.notify = lambda message, **_: notes.append(str(message))
    return notes


async def wait_until(pilot, predicate, timeout_s: float = 10.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"not reached within {timeout_s} s: {predicate}")
