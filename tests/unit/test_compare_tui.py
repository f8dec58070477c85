"""`gputop compare A B --tui` (tui/compare_app.py): the table holds both runs and the verdict of the comparison
compare_runs built, `?` lists the keys, `q` quits; SVG snapshots at 80x24 and 160x48 of two fixture recordings
(a data-bound run against a GPU-bound one), stored in tests/unit/__snapshots__/ as test_tui_snapshots.py's are; bad
input is one line and exit 2 before any screen; and (slow) the real command in a real terminal (tmux) on two real
recorded runs of the seed case scaled down (tests/fixtures/compare/)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.tmux import Tmux

from probes.compare import compare_runs, load_run, measure_rows
from tui.compare_app import CompareTable, CompareVerdict, RunsHeader, make_compare_app
from tui.panes.help import HelpScreen

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
DATA_BOUND = FIXTURES / "recordings" / "data_bound.jsonl"
GPU_BOUND = FIXTURES / "frames" / "h200_gpu_bound.jsonl"
NARROW, WIDE = FIXTURES / "compare" / "narrow.jsonl", FIXTURES / "compare" / "wide.jsonl"
SIZES = {"80x24": (80, 24), "160x48": (160, 48)}


def comparison():
    # Paths relative to the repository, as a person types them, so the header (and the snapshot) does not
    # depend on where the checkout lives.
    return compare_runs(load_run(str(DATA_BOUND.relative_to(REPO)), "data-bound"),
                        load_run(str(GPU_BOUND.relative_to(REPO)), "gpu-bound"))


@pytest.fixture(autouse=True)
def _from_the_repository(monkeypatch):
    monkeypatch.chdir(REPO)


def test_the_table_holds_both_runs_and_the_verdict_and_q_quits():
    asyncio.run(_table_verdict_keys_and_quit(comparison()))


async def _table_verdict_keys_and_quit(shown):
    app = make_compare_app(shown)
    async with app.run_test(size=SIZES["160x48"]) as pilot:
        await pilot.pause()
        table = app.query_one(CompareTable)
        assert [str(column.label) for column in table.columns.values()] == ["", "data-bound", "gpu-bound"]
        cells = [[str(cell) for cell in table.get_row_at(index)] for index in range(table.row_count)]
        assert cells == [list(row) for row in measure_rows(shown)]
        assert ["bottleneck", "data_bound", "gpu_bound"] in cells
        header = str(app.query_one(RunsHeader).render())
        assert "tests/fixtures/recordings/data_bound.jsonl (recording)" in header
        assert "tests/fixtures/frames/h200_gpu_bound.jsonl (recording)" in header
        verdict = str(app.query_one(CompareVerdict).render())
        assert verdict.splitlines() == list(shown.verdict)
        assert "the bottlenecks differ: data-bound data_bound, gpu-bound gpu_bound" in verdict  # two jobs: none moved
        await pilot.press("j", "j")
        assert table.cursor_row == 2
        await pilot.press("k")
        assert table.cursor_row == 1
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("question_mark")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running


@pytest.mark.parametrize("size", SIZES, ids=list(SIZES))
def test_compare_view(snap_compare, size):
    assert snap_compare(make_compare_app(comparison()), terminal_size=SIZES[size])


def test_compare_help(snap_compare):
    assert snap_compare(make_compare_app(comparison()), press=["question_mark"], terminal_size=SIZES["80x24"])


def gputop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tui", *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), check=False)


@pytest.fixture
def tmux(request):
    session = Tmux(request.node.name)
    yield session
    session.kill()  # the server and the gputop it runs


def test_narrowed_to_80_columns_both_runs_stay_on_screen_long_cells_wrap_and_the_cursor_stays():
    asyncio.run(_both_columns_fit(compare_runs(load_run(str(NARROW), "narrow"), load_run(str(WIDE), "wide"))))


async def _both_columns_fit(shown):
    app = make_compare_app(shown)
    async with app.run_test(size=SIZES["160x48"]) as pilot:
        await pilot.press("j", "j")
        await pilot.resize_terminal(*SIZES["80x24"])
        await pilot.pause()
        table = app.query_one(CompareTable)
        assert table.cursor_row == 2
        assert table.virtual_size.width <= table.size.width  # nothing past the right edge to scroll to
        tokens_row = next(index for index, (what, _, _) in enumerate(measure_rows(shown)) if what == "tokens/iter")
        # "512 (batch_size × block_size × gradient_accumulation_steps)" wraps onto more lines, whole
        assert table.ordered_rows[tokens_row].height > 1
        assert str(table.get_row_at(tokens_row)[1]) == measure_rows(shown)[tokens_row][1]
