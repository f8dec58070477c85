"""The help screen (`?`): every key, generated from the bindings themselves so it cannot drift from them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEY_COLUMN_WIDTH = 12


def help_text(groups: Sequence[tuple[str, Sequence[Binding]]], key_display) -> Group:
    """Key and explanation per binding, under a heading per group; `key_display(binding)` names a key.

    A two-column grid, so a long explanation wraps under itself rather than under the key.
    """
    parts: list = []
    for title, bindings in groups:
        keys = Table.grid(padding=(0, 1))
        keys.add_column(width=KEY_COLUMN_WIDTH, style="bold cyan")
        keys.add_column(ratio=1)
        for binding in bindings:
            keys.add_row(f" {key_display(binding)}", binding.tooltip or binding.description)
        parts += [Text(title, style="bold underline"), keys, Text()]
    parts.append(Text("Mouse: click a pane to focus it, a row to select it, a tree node to open it.\n"
                      "Close this help with ?, esc or q.", style="dim"))
    return Group(*parts)


class HelpScreen(ModalScreen[None]):
    # Its own look, so each app that shows it (gputop, gputop compare --tui) shows the same box.
    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }

    #help-box {
        width: 84;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: round $accent;
        border-title-color: $accent;
        background: $surface;
        padding: 0 1;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "dismiss", "Close help"),
        Binding("j", "scroll('down')", "Down", show=False),
        Binding("k", "scroll('up')", "Up", show=False),
    ]

    def __init__(self, groups: Sequence[tuple[str, Sequence[Binding]]]) -> None:
        super().__init__()
        self.groups = groups

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box") as box:
            box.border_title = "gputop keys"
            yield Static(help_text(self.groups, self._key_display), id="help-text")

    def _key_display(self, binding: Binding) -> str:
        if binding.key_display:
            return binding.key_display
        return " / ".join(self.app.get_key_display(Binding(key, binding.action))
                          for key in binding.key.split(","))

    def action_scroll(self, direction: str) -> None:
        box = self.query_one("#help-box", VerticalScroll)
        if direction == "down":
            box.scroll_down()
        else:
            box.scroll_up()
