"""Frictions of a new user's first hour on a fresh clone (issue 37):

- a hung job's place: the one line that says where it is stuck shows its file:line first, so that on an 80×24
  screen, where the line is cut to a row, the cut eats the function and the rest, never the place;
- the filter box (`/`), in the stacks pane and in the job picker: Enter applies the filter and closes the box
  (focus back to the table), Esc in the box clears it and closes it only, Esc outside it goes back one step;
- `gputop demo` says it is stopping its training process as soon as the screen is gone, before waiting for it.
"""

from __future__ import annotations

import re
import sys

import pytest
from support.pilot import frames_of, hot_functions, pilot_test, wait_until
from support.screen import pane_rows
from textual.widgets import DataTable, Input

from probes.frame import StackFrame
from probes.jobs.census import CensusReading, JobSummary
from tui.app import make_app
from tui.panes.stacks import StacksPane
from tui.panes.verdict import VerdictPane
from tui.picker import JobPicker

# --- 1. where a hung job is stuck, file:line first ----------------------------------------------------------

STUCK_AT = re.compile(r"main thread stuck at torch/utils/data/dataloader\.py:\d+\b")


@pytest.mark.parametrize("width", [80, 100, 120])
@pilot_test
async def test_the_stuck_line_shows_file_and_line_first_at_any_width_from_80(width):
    frames = frames_of("hung")
    frozen = frames[-1].time + 2.0
    app = make_app(replay_frames=frames, clock=lambda: frozen)
    async with app.run_test(size=(width, 24)) as pilot:
        await wait_until(pilot, lambda: app.view is not None and app.view.verdict.liveness == "hung")
        await pilot.pause(0.2)  # the pane drawn at its size
        rows = pane_rows(app, app.query_one(VerdictPane))
        stuck = [row for row in rows if "main thread stuck" in row]
        assert stuck and STUCK_AT.search(stuck[0]), "\n".join(rows)
        # The headless words are the same: the place first, then the function and the user's frame that called it.
        line = next(e for e in app.view.verdict.evidence if e.startswith("main thread stuck"))
        assert re.match(STUCK_AT.pattern + r" in _BaseDataLoaderIter\.__next__, called from ", line), line


def test_the_place_first_without_a_line_number_or_a_frame_still_reads():
    from probes.diagnosis.stacks import format_place_first

    queue_get = StackFrame("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py", 103)
    fetch = StackFrame("fetch", "/home/u/train.py", 15)
    assert format_place_first(queue_get, fetch) == ("at multiprocessing/queues.py:103 in Queue.get, called from "
                                                    "fetch (train.py:15)")
    assert format_place_first(queue_get, queue_get) == "at multiprocessing/queues.py:103 in Queue.get"
    assert format_place_first(StackFrame("poll", "/home/u/train.py", 0), None) == "at train.py in poll"
    assert format_place_first(None, None) == "in an unknown frame"


# --- 2. the filter box: Enter applies and closes it, Esc in it clears and closes it only ---------------------


@pilot_test
async def test_enter_closes_the_stacks_filter_box_and_esc_in_the_box_closes_only_the_box():
    app = make_app(replay_frames=frames_of("data_bound"))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        stacks = app.query_one(StacksPane)
        box = app.query_one("#filter", Input)
        table = app.query_one("#hot", DataTable)
        everything = hot_functions(app)
        await pilot.press("slash", *"getitem", "enter")
        await pilot.pause()
        filtered = hot_functions(app)
        assert filtered and len(filtered) < len(everything)
        assert not box.display and app.focused is table  # applied, the box closed, back on the table
        # Drilled down from the filtered table, Esc goes back to it, the filter still applied.
        table.move_cursor(row=next(i for i, f in enumerate(filtered) if f.endswith("__getitem__")))
        await pilot.press("enter")
        await pilot.pause()
        assert stacks.mode == "tree"
        await pilot.press("escape")
        await pilot.pause()
        assert stacks.mode == "hot" and hot_functions(app) == filtered and not box.display
        # In a drill-down (one process's frames), Esc in the box clears the filter and closes the box only.
        stacks.scope_to_process(app.view.frames[-1].target.pid)
        await pilot.press("slash")
        await pilot.pause()
        assert box.display and app.focused is box and box.value == "getitem"  # `/` edits the kept filter
        await pilot.press("escape")
        await pilot.pause()
        assert not box.display and stacks.filter_text == "" and app.focused is table
        assert stacks.scope_pid == app.view.frames[-1].target.pid and stacks.mode == "hot"
        # Outside the box Esc does what it did: back one step, here out of the process.
        await pilot.press("escape")
        await pilot.pause()
        assert stacks.scope_pid is None and hot_functions(app) == everything


def picker_jobs() -> JobPicker:
    now = 1_800_000_000.0
    jobs = tuple(JobSummary(root_pid=pid, launcher="python", ranks=1, world_size=None, workers=0, processes=1,
                            gpus=(), cpu_pct=10.0, started_at=now - 100, found_by="imports torch",
                            command=f"python {name}.py")
                 for pid, name in ((101, "train"), (102, "evaluate"), (103, "train_lora")))
    reading = CensusReading(jobs=jobs, time=now)
    return JobPicker(lambda: reading, initial=reading, clock=lambda: now, refresh_s=None)


@pilot_test
async def test_enter_closes_the_job_pickers_filter_box_and_esc_in_the_box_clears_it():
    app = picker_jobs()
    async with app.run_test(size=(120, 20)) as pilot:
        await pilot.pause()
        box = app.query_one("#picker-filter", Input)
        table = app.query_one(DataTable)
        await pilot.press("slash", *"train", "enter")
        await pilot.pause()
        assert sorted(app.shown_pids) == [101, 103]  # applied
        assert not box.display and app.focused is table  # the box closed, back on the list
        assert app.return_value is None  # Enter in the box attached to nothing
        await pilot.press("slash")
        await pilot.pause()
        assert box.display and app.focused is box
        await pilot.press("escape")  # in the box: cleared and closed
        await pilot.pause()
        assert not box.display and app.filter_text == "" and sorted(app.shown_pids) == [101, 102, 103]
        assert app.focused is table and app.is_running
        # Esc outside the box does what it did: clears a kept filter.
        await pilot.press("slash", *"lora", "enter")
        await pilot.pause()
        assert app.shown_pids == [103] and not box.display
        await pilot.press("escape")
        await pilot.pause()
        assert sorted(app.shown_pids) == [101, 102, 103]
        # Enter on the list attaches, as before.
        await pilot.press("enter")
        await pilot.pause()
    assert app.return_value in (101, 102, 103)


# --- 3. `gputop demo` says it is stopping as soon as the screen is gone ---------------------------------------


def test_demo_says_it_is_stopping_its_training_before_waiting_for_it(monkeypatch, tmp_path):
    """The order of the calls on the way out of `gputop demo`, with its process, engine and app stood in for (the
    real command in tmux: tests/e2e/test_tui_tmux.py): the line is on stderr before the sampler is closed and
    before the training process is waited for, the seconds a person otherwise looked at a blank screen."""
    import importlib.util
    import io

    import probes.monitoring.engine
    import tui.app
    import tui.demo

    stderr = io.StringIO()
    said: list[tuple[str, str]] = []  # (the call, what stderr said by then)

    class FakeProcess:
        pid = 4242

    class FakeEngine:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def close(self) -> None:
            said.append(("engine.close", stderr.getvalue()))

    class FakeApp:
        return_code = 0

        def run(self) -> None:  # `q` pressed: the screen is gone when run() returns
            said.append(("app.run", stderr.getvalue()))

        def call_next(self, *args) -> None:
            pass

        def exit(self) -> None:
            pass

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "torch" else
                        find_spec(name, *a))
    monkeypatch.setattr(tui.demo, "start_demo_target", lambda workdir: FakeProcess())
    monkeypatch.setattr(tui.demo, "stop_process_group", lambda process: said.append(("stop", stderr.getvalue())))
    monkeypatch.setattr(probes.monitoring.engine, "Engine", FakeEngine)
    monkeypatch.setattr(tui.app, "make_app", lambda **kwargs: FakeApp())
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setattr(tui.demo.tempfile, "mkdtemp", lambda prefix: str(tmp_path / "demo"))
    (tmp_path / "demo").mkdir()

    assert tui.demo.run_demo(interval_s=1.0) == 0
    stopping = "gputop demo: stopping the demo training process (PID 4242)…"
    assert [call for call, _ in said] == ["app.run", "engine.close", "stop"]
    assert stopping not in said[0][1]
    assert said[1][1].strip() == stopping and said[2][1].strip() == stopping, said
    assert stderr.getvalue().splitlines() == [stopping, "gputop demo: stopped the demo training process (PID 4242)."]
    assert not (tmp_path / "demo").exists()  # the demo's folder removed on the way out
