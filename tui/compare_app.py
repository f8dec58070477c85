"""The TUI view of `gputop compare A B --tui`: the two runs side by side as a table, the verdict in words above
it, and which file each column came from in the header.

It shows a `probes.compare.Comparison` as compare_runs built it: the rows are probes.compare's `measure_rows`,
the same the plain text prints, so the screen and `gputop compare` cannot disagree. Nothing is computed here.
`make_compare_app()` is the one factory the CLI, the tests and scripts/export_screenshots.py use.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Static

from probes.compare import Comparison, RunSummary, measure_rows, source
from tui.panes.help import HelpScreen

# Each column's padding (one cell either side, three columns) and the vertical scrollbar's two cells.
COLUMN_CHROME = 3 * 2 + 2
# A run's column narrower than this would wrap every cell.
MIN_RUN_COLUMN = 12


class RunsHeader(Static):
    """One line per run: its column's label and the file it was read from."""


class CompareVerdict(Static):
    """What made the difference, in words: probes.compare's verdict, its headline first."""


class CompareTable(DataTable):
    """A row per measure, a column per run."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "cursor_down", "Down", show=False, tooltip="Move down (also ↓; k / ↑ moves up)"),
        Binding("k", "cursor_up", "Up", show=False),
    ]


class CompareApp(App[None]):
    """Two runs side by side; `q` quits, `?` lists the keys."""

    TITLE = "gputop compare"
    ENABLE_COMMAND_PALETTE = False
    CSS_PATH = Path(__file__).with_name("compare_app.tcss")
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit", tooltip="Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("question_mark", "help", "Help", key_display="?", tooltip="Show every key"),
    ]

    def __init__(self, comparison: Comparison) -> None:
        super().__init__()
        self.comparison = comparison

    def compose(self) -> ComposeResult:
        a, b = self.comparison.a, self.comparison.b
        label_width = max(len(a.label), len(b.label))
        yield RunsHeader(Text("\n").join([_run_line(a, label_width), _run_line(b, label_width)]), id="runs")
        yield CompareVerdict(_verdict_text(self.comparison.verdict), id="compare-verdict")
        yield CompareTable(id="compare-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(CompareTable).focus()

    def on_resize(self, event: events.Resize) -> None:
        self._fill_table(event.size.width)

    def _fill_table(self, screen_width: int) -> None:
        """The table at this width: both runs' columns always on screen, a long cell wrapping within its column
        (its row grows) rather than pushing B's column past the right edge."""
        table = self.query_one(CompareTable)
        measures = measure_rows(self.comparison)
        what_width = max(len(what) for what, _, _ in measures)
        room = screen_width - what_width - COLUMN_CHROME
        cursor = table.cursor_row
        table.clear(columns=True)
        labels = (self.comparison.a.label, self.comparison.b.label)
        a_widest, b_widest = (max(len(labels[column - 1]), *(len(row[column]) for row in measures))
                              for column in (1, 2))
        # A takes what it needs when B leaves the room, else at least half; B takes what A leaves.
        a_width = min(a_widest, max(room - b_widest, room // 2))
        b_width = min(b_widest, room - a_width)
        table.add_column("", width=what_width)
        for label, width in zip(labels, (a_width, b_width), strict=True):
            table.add_column(label, width=max(MIN_RUN_COLUMN, width))
        for what, a_cell, b_cell in measures:
            table.add_row(Text(what, style="bold"), Text(a_cell), Text(b_cell), height=None)
        table.move_cursor(row=cursor)

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
            return
        self.push_screen(HelpScreen(self.help_bindings()))

    def help_bindings(self) -> list[tuple[str, list[Binding]]]:
        """Every documented key, generated from the bindings themselves."""
        return [("Everywhere", [b for b in self.BINDINGS if isinstance(b, Binding) and b.tooltip]),
                ("Table", [b for b in CompareTable.BINDINGS if isinstance(b, Binding) and b.tooltip])]


def _run_line(run: RunSummary, label_width: int) -> Text:
    # Both labels padded to one width, so the two sources start in the same column.
    return Text.assemble((f" {run.label.ljust(label_width)} ", "bold reverse"), " ", (source(run), "dim"))


def _verdict_text(verdict: tuple[str, ...]) -> Text:
    # The headline says what made the difference; the lines after it are its evidence.
    lines = [Text(line, style="bold" if index == 0 else "") for index, line in enumerate(verdict)]
    return Text("\n").join(lines)


def make_compare_app(comparison: Comparison) -> CompareApp:
    """The compare view of a comparison from probes.compare.compare_runs."""
    return CompareApp(comparison)
