"""Refilling a DataTable from fresh rows without redrawing it when nothing changed, and the row table the
process and rank panes share.

Redrawing a DataTable is most of what the screen costs each tick, and most ticks change no hot frame
(stack counts arrive in lumps), so the panes hand their rows here instead of clearing and re-adding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.widgets import DataTable

Row = tuple[str, tuple[Text, ...]]  # (row key, cells)


class SyncedTable(DataTable):
    """A DataTable that sync_rows refills: it keeps the rows it shows, to tell what changed."""

    _synced_rows: list[Row] | None = None  # None: the next sync_rows redraws (a new table, or rebuilt columns)


def sync_rows(table: SyncedTable, rows: Sequence[Row], *, follow_key: bool) -> None:
    """Show `rows` in `table`. With `follow_key`, a cursor the user moved off the top row stays on the
    same key as rows re-sort; otherwise it keeps its position."""
    rows = list(rows)
    previous = table._synced_rows
    if previous == rows:
        return
    if previous is not None and [key for key, _ in previous] == [key for key, _ in rows]:
        # Same rows in the same order: change only the cells that differ. Clearing and re-adding would
        # make the table re-measure itself and the screen run a layout pass.
        columns = [column.key for column in table.ordered_columns]
        for (key, old_cells), (_, new_cells) in zip(previous, rows, strict=True):
            for column, old, new in zip(columns, old_cells, new_cells, strict=True):
                if old != new:
                    table.update_cell(key, column, new)
        table._synced_rows = rows
        return
    cursor_key = None
    if follow_key and table.row_count and table.cursor_row > 0:
        cursor_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
    table._synced_rows = rows
    table.clear()
    for key, cells in rows:
        table.add_row(*cells, key=key)
    keys = [key for key, _ in rows]
    if cursor_key in keys:
        table.move_cursor(row=keys.index(cursor_key), animate=False, scroll=False)


def forget_rows(table: SyncedTable) -> None:
    """Make the next sync_rows redraw (after the columns were rebuilt)."""
    table._synced_rows = None


class FittedTable(SyncedTable):
    """Fixed columns, then one column whose width follows the pane (a command, a verdict); j/k move the cursor."""

    _last_room: int | None = None  # the room the last column was laid out for; None: lay them out again

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    def fit_columns(self, fixed: Sequence[tuple[str, int, bool]], last: str, room: int) -> None:
        """Rebuild the columns when the room for the last one changed (a resize); none for it when room is 0."""
        if self._last_room == room:
            return
        self._last_room = room
        self.clear(columns=True)
        forget_rows(self)
        for heading, width, right in fixed:
            self.add_column(Text(heading, justify="right" if right else "left"), width=width)
        if room:
            self.add_column(last, width=room)
