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
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Static

from probes.compare import Comparison, RunSummary, measure_rows, source
from tui.panes.help import HelpScreen


class RunsHeader(Static):
    """One line per run: its column's label and the file it was read from."""


class CompareVerdict(Static):
    """What made the difference, in words: probes.compare's verdict, its headline first."""


class CompareTable(DataTable):
    """A row per measure, a column per run."""

    BINDINGS: ClassVar[list[Binding]] = [
        Binding("j", "cursor_down", "Down", show=False, tooltip="Move down (also ↓; k / ↑ moves up)"),
        Binding("k", "cursor_up", "Up", show=False),
    ]


class CompareApp(App[None]):
    """Two runs side by side; `q` quits, `?` lists the keys."""

    TITLE = "gputop compare"
    ENABLE_COMMAND_PALETTE = False
    CSS_PATH = Path(__file__).with_name("compare_app.tcss")
    BINDINGS: ClassVar[list[Binding]] = [
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
        table = self.query_one(CompareTable)
        table.add_columns("", self.comparison.a.label, self.comparison.b.label)
        for what, a_cell, b_cell in measure_rows(self.comparison):
            table.add_row(Text(what, style="bold"), a_cell, b_cell)
        table.focus()

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
            return
        self.push_screen(HelpScreen(self.help_bindings()))

    def help_bindings(self) -> list[tuple[str, list[Binding]]]:
        """Every documented key, generated from the bindings themselves."""
        return [("Everywhere", [b for b in self.BINDINGS if isinstance(b, Binding) and b.tooltip]),
                ("Table", [b for b in CompareTable.BINDINGS if b.tooltip])]


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
