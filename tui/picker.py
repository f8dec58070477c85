"""The job picker: `gputop` with no PID, in a terminal, lists this machine's training jobs (probes/jobs/census.py)
the way htop lists processes, and Enter attaches to the one under the cursor.

The app returns the chosen job's root PID (None when the user quits); tui/commands/attach.py then opens the
normal attach screen on it. The census is read off the UI thread every REFRESH_S, one scan at a time, so a
slow /proc walk never freezes the keys. Sorting and filtering are the census module's pure functions; the
cells are tui/joblist.py's, the same words `gputop --list` prints.

Each refresh sorts again. Until a key moves the cursor it stays on the top row, the job the sort puts first (the
first screen sorts jobs whose CPU% is still being measured, and the cursor followed one of them down the list:
Enter attached to a job on the second row while the busiest sat on the first). Once moved, the cursor stays on
the job it is on (by its root PID, never its row); the keys that move it are the app's, run in the order they and
the refreshes arrive, so a Down pressed on the rows a person saw moves on those rows. A CPU% is the difference of
two readings: the first screen shows "…" (being measured) and the first refresh, CPU_WINDOW_S later from the same
census, shows it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Input, Static

from probes.monitoring import CensusReading, job_matches, sort_jobs
from tui.joblist import COLUMNS, job_cells

REFRESH_S = 2.0
# The first refresh comes sooner: it brings every CPU% (a CPU% needs two readings), over a window long enough for the
# kernel's 10 ms ticks. The rows come at once, from the first reading.
CPU_WINDOW_S = 0.5
# The table's cursor keys and its actions for them, which the picker runs itself (see BINDINGS).
CURSOR_KEYS = (("up", "cursor_up"), ("down", "cursor_down"), ("pageup", "page_up"), ("pagedown", "page_down"),
               ("ctrl+home", "scroll_top"), ("ctrl+end", "scroll_bottom"))
MEASURING = "…"  # a job's CPU% before its second reading: "-" read as "not known", this as "coming"
MIN_COMMAND_CHARS = 20  # below this the table scrolls sideways rather than cut the command shorter
SORT_WORDS = {"cpu": "CPU%", "age": "age (youngest first)", "command": "command"}


class JobPicker(App[int | None]):
    """Choose a training job to attach to. `scan` returns the census now (called off the UI thread); `initial`
    (a reading by the same census, so the next scan has each job's CPU%) is shown at once and scanned again
    CPU_WINDOW_S later; `clock` freezes the ages (tests); `refresh_s=None` never scans again."""

    TITLE = "gputop: training jobs on this machine"
    CSS = """
    #picker-status { height: 1; padding: 0 1; background: $boost; }
    #picker-table { height: 1fr; overflow-x: auto; }
    #picker-filter { display: none; }
    #picker-filter.-shown { display: block; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        # The keys that move the cursor or attach are the app's, run as each key arrives, in order with the
        # refreshes: on the table's own bindings a key ran only once it had gone down to the table and back up,
        # after a refresh that came meanwhile had re-sorted the rows (Down, Enter attached to another job).
        Binding("enter", "attach", "Attach", priority=True),
        *(Binding(key, f"cursor('{action}')", show=False, priority=True) for key, action in CURSOR_KEYS),
        Binding("c", "sort('cpu')", "Sort CPU%"),
        Binding("a", "sort('age')", "Sort age"),
        Binding("n", "sort('command')", "Sort command"),
        Binding("slash,f", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, scan: Callable[[], CensusReading], *, initial: CensusReading | None = None,
                 clock: Callable[[], float] | None = None, refresh_s: float | None = REFRESH_S) -> None:
        super().__init__()
        self._scan = scan
        self._reading = initial
        self._clock = clock or time.time
        self._refresh_s = refresh_s
        self.sort_key = "cpu"
        self.sort_reverse = False
        self.filter_text = ""
        self.shown_pids: list[int] = []  # the table's rows, top to bottom (tests read the order)
        self._mounted = False
        self._cursor_moved = False  # a key has moved the cursor: from then on it follows its job, not the top row

    def compose(self) -> ComposeResult:
        yield Static(id="picker-status")
        yield DataTable(id="picker-table", cursor_type="row", zebra_stripes=True)
        yield Input(placeholder="filter: part of a command, launcher or PID (Enter keeps it, Esc clears)",
                    id="picker-filter")
        yield Footer()

    def on_resize(self) -> None:
        if self._mounted:  # the command column's room follows the width
            self.call_after_refresh(self._show)

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns(*COLUMNS)
        self._mounted = True
        self._show()
        self.call_after_refresh(self._show)  # again once the table has its width
        if self._reading is None:
            self._scan_in_background()
        if self._refresh_s is not None:
            self.set_timer(min(CPU_WINDOW_S, self._refresh_s), self._scan_in_background)
            self.set_interval(self._refresh_s, self._scan_in_background)
        self.query_one(DataTable).focus()

    # --- the census, off the UI thread ------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="census")
    def _scan_in_background(self) -> None:
        reading = self._scan()
        self.call_from_thread(self._received, reading)

    def _received(self, reading: CensusReading) -> None:
        self._reading = reading
        self._show()

    # --- drawing ---------------------------------------------------------------------------------------

    def _show(self) -> None:
        table = self.query_one(DataTable)
        selected = self.shown_pids[table.cursor_row] if 0 <= table.cursor_row < len(self.shown_pids) else None
        now = self._clock()
        jobs = [] if self._reading is None else [j for j in self._reading.jobs if job_matches(j, self.filter_text)]
        jobs = sort_jobs(jobs, self.sort_key, now=now, reverse=self.sort_reverse)
        table.clear()
        rows = [job_cells(job, now, cpu_unknown=MEASURING) for job in jobs]
        # The command takes what the other columns leave (each has a cell of padding either side); the whole
        # command is in `gputop --list`.
        fixed = sum(max(len(cell) for cell in column) + 2
                    for column in zip(COLUMNS[:-1], *(row[:-1] for row in rows), strict=False))
        # The table spans the screen: before its first layout its own width is 0, and a command cut to the minimum then
        # stayed so at 160 columns when no later census redrew it (the snapshot caught either, by timing).
        width = table.size.width or self.size.width
        room = max(MIN_COMMAND_CHARS, width - fixed - 3)
        for job, cells in zip(jobs, rows, strict=True):
            table.add_row(*cells[:-1], cells[-1][:room], key=str(job.root_pid))
        self.shown_pids = [job.root_pid for job in jobs]
        if self._cursor_moved and selected in self.shown_pids:
            table.move_cursor(row=self.shown_pids.index(selected))
        elif not self._cursor_moved and self.shown_pids:
            table.move_cursor(row=0)
        self.query_one("#picker-status", Static).update(self._status_line(len(jobs)))

    def _status_line(self, shown: int) -> str:
        if self._reading is None:
            return "looking for training jobs…"
        total = len(self._reading.jobs)
        counted = f"{total} training job{'s' if total != 1 else ''}" if total else "no training job now"
        if self.filter_text:
            counted += f", {shown} matching '{self.filter_text}'"
        order = SORT_WORDS[self.sort_key] + (", reversed" if self.sort_reverse else "")
        parts = [counted, f"sorted by {order}", "Enter attaches"]
        if self._reading.gpu_note:
            parts.append(self._reading.gpu_note)
        return " · ".join(parts)

    # --- keys ------------------------------------------------------------------------------------------

    def action_sort(self, key: str) -> None:
        """A sort key; the same key again turns the order round, as htop does."""
        self.sort_reverse = not self.sort_reverse if key == self.sort_key else False
        self.sort_key = key
        self._show()

    def action_filter(self) -> None:
        box = self.query_one(Input)
        box.add_class("-shown")
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one(Input)
        box.value = ""
        box.remove_class("-shown")
        self.filter_text = ""
        self.query_one(DataTable).focus()
        self._show()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self._show()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter: the filter stays applied (the status line says so; `/` edits it) and the box closes."""
        event.input.remove_class("-shown")
        self.query_one(DataTable).focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        pid = event.row_key.value
        if pid is not None:  # every row is added with its job's root PID as its key
            self.exit(int(pid))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The cursor keys and Enter are the filter box's while it has the focus (Enter keeps the filter)."""
        if action in ("attach", "cursor") and isinstance(self.focused, Input):
            return False
        return True

    def action_cursor(self, action: str) -> None:
        self._cursor_moved = True
        getattr(self.query_one(DataTable), f"action_{action}")()

    def action_attach(self) -> None:
        table = self.query_one(DataTable)
        if 0 <= table.cursor_row < len(self.shown_pids):
            self.exit(self.shown_pids[table.cursor_row])
