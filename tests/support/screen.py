"""What an app under a Pilot shows, as the plain text of its terminal (what `tmux capture-pane -p` would read), and
the rows of one pane of it: the screen a person reads, for checks that a line is whole on it."""

from __future__ import annotations

import io

from rich.console import Console
from textual.app import App
from textual.widget import Widget

SCROLLBAR_CHARS = "▁▂▃▄▅▆▇█"


def screen_text(app: App) -> str:
    """The whole screen as text, one line per row."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True, legacy_windows=False)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


def pane_rows(app: App, pane: Widget) -> list[str]:
    """The rows of the screen inside `pane`'s content region, its scrollbar left out."""
    region = pane.content_region
    rows = screen_text(app).splitlines()[region.y:region.y + region.height]
    return [row[region.x:region.x + region.width].rstrip().rstrip(SCROLLBAR_CHARS).rstrip() for row in rows]


def words(text: str) -> str:
    """The text with every run of blanks one space: a line wrapped over rows reads as it was written."""
    return " ".join(text.split())
