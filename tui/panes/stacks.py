"""The Stacks pane: where the target's threads spend their samples.

Three views, one at a time:
  hot   hot frames (own%, total%, function, file:line) summed over a window (`w`), for all processes,
        one process (enter on it in the CPU pane) or one thread (enter on it in the now view);
        idle threads toggle with `i`, `/` filters by function or file.
  tree  `enter` on a hot frame: who calls it and what it calls, as expandable trees.
  now   `d`: each thread's current stack, innermost first, like `py-spy dump`.
`esc` goes back one step: tree -> hot, thread -> process -> all processes. Aggregation is probes.sampling.stacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import ContentSwitcher, DataTable, Input, Static, Tree
from textual.widgets.tree import TreeNode

from probes.frame import Frame, StackCount, StackFrame, ThreadStack
from probes.view.panes import CallNode, call_tree, drill_counts, hot_frames, recent_frames, select_samples, short_path
from tui.panes.tables import SyncedTable, forget_rows, sync_rows
from tui.panes.text import clip, clip_left, duration, node_title, process_role_words

WINDOW_CHOICES_S: tuple[float | None, ...] = (10.0, 30.0, 60.0, 300.0, None)  # None: the whole history
DEFAULT_WINDOW_INDEX = 1
HOT_FRAMES_LIMIT = 100
CALL_TREE_OPEN_LEVELS = 2
PERCENT_COLUMN_WIDTH = 6
# DataTable pads each cell by one column either side; the vertical scrollbar takes two more.
TABLE_CHROME = 2 * 4 + 2
MIN_FUNCTION_WIDTH = 16
DATA_REDRAW_INTERVAL_S = 2.0
# A dump older than this (dumps are spaced out, and a failing process keeps its last one) is marked stale in "now".
STALE_DUMP_S = 5.0

FrameKey = tuple[str, str, int]
TITLE = "4 Stacks"


def window_counts(frames: Sequence[Frame], window_s: float | None) -> list[StackCount]:
    """The stack counts of the frames within `window_s` of the latest (all of them for None)."""
    return [c for f in recent_frames(frames, window_s) for c in f.stacks.counts]


def frame_label(function: str, file: str, line: int, native: bool = False) -> str:
    where = short_path(file) + (f":{line}" if line else "")
    return f"{function} ({where})" + (" [native]" if native else "")


def matches_filter(function: str, file: str, text: str) -> bool:
    needle = text.lower()
    return needle in function.lower() or needle in file.lower()


def hot_column_widths(available: int, longest_function: int) -> tuple[int, int]:
    """(function, file) widths that fit the table into `available` cells: the function column takes
    what it needs up to half the room left, the file column the rest."""
    room = max(0, available - TABLE_CHROME - 2 * PERCENT_COLUMN_WIDTH)
    function = min(longest_function, max(MIN_FUNCTION_WIDTH, room // 2))
    return function, max(8, room - function)


class HotTable(SyncedTable):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "cursor_down", "Down", show=False, tooltip="Move down (also ↓; k / ↑ moves up)"),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    def set_columns(self, function_width: int, file_width: int, by_line: bool) -> None:
        """Rebuild the columns when the room or the file heading changed (a resize, `l`)."""
        wanted = (function_width, file_width, by_line)
        if getattr(self, "_column_spec", None) == wanted:
            return
        self._column_spec = wanted
        self.clear(columns=True)
        forget_rows(self)
        self.add_column(Text("own%", justify="right"), width=PERCENT_COLUMN_WIDTH, key="own")
        self.add_column(Text("total%", justify="right"), width=PERCENT_COLUMN_WIDTH, key="total")
        self.add_column("function", width=function_width, key="function")
        self.add_column("file:line" if by_line else "file", width=file_width, key="where")


class StackTree(Tree):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]


class StacksPane(Vertical):
    HELP_BINDINGS: ClassVar[list[Binding]] = [
        Binding("enter", "", "Drill down", tooltip="Hot frame: its callers and callees. Thread (now view): "
                "its hot frames. Process (CPU pane): its hot frames"),
        Binding("escape", "back", "Back", tooltip="Back one step: call tree -> hot frames, thread -> "
                "process -> all"),
        Binding("space", "", "Expand", tooltip="Expand or collapse a node of a tree"),
    ]
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "back", "Back", show=False)]

    def __init__(self, *, native_available: bool) -> None:
        super().__init__(id="stacks", classes="pane")
        self.border_title = TITLE
        self.native_available = native_available
        self.window_index = DEFAULT_WINDOW_INDEX
        self.include_idle = False  # py-spy top's default; a hint says when idle threads hold most samples
        self._idle_in_view = False  # include_idle, or every thread is idle (an empty table helps nobody)
        self.by_line = False
        self.filter_text = ""
        self.scope_pid: int | None = None
        self.scope_tid: int | None = None
        # A distributed job's selected rank and its workers: every view shows only their samples.
        self.group: frozenset[int] | None = None
        self.group_words: str | None = None
        self.mode = "hot"
        self.drill_key: FrameKey | None = None
        self._frames: tuple[Frame, ...] = ()
        self._shown_view_inputs: tuple | None = None
        self._shown_data_inputs: tuple | None = None
        self._drawn_at = float("-inf")

    def compose(self):
        yield Static(id="stacks-header")
        with ContentSwitcher(initial="hot"):
            yield HotTable(id="hot", cursor_type="row")
            yield StackTree("call tree", id="calltree")
            now = StackTree("threads", id="now")
            now.auto_expand = False  # enter on a thread scopes the hot frames; space expands
            yield now
        yield Input(placeholder="filter hot frames: part of a function or file name (enter keeps, esc clears)",
                    id="filter")

    # --- state changes, called by the app's key actions ------------------------------------------

    @property
    def window_s(self) -> float | None:
        return WINDOW_CHOICES_S[self.window_index]

    def cycle_window(self) -> None:
        self.window_index = (self.window_index + 1) % len(WINDOW_CHOICES_S)
        self._refresh()

    def toggle_idle(self) -> None:
        self.include_idle = not self.include_idle
        self._refresh()

    def toggle_lines(self) -> None:
        self.by_line = not self.by_line
        if self.mode == "tree":  # the drilled frame was chosen under the other grouping
            self._switch("hot")
        else:
            self._refresh()

    def toggle_now(self) -> None:
        self._switch("hot" if self.mode == "now" else "now")

    def scope_to_process(self, pid: int) -> None:
        self.scope_pid, self.scope_tid = pid, None
        self._switch("hot")

    def set_group(self, group: frozenset[int] | None, words: str | None = None) -> None:
        """Show only these processes' samples (None: all); a process or thread chosen outside them is let go."""
        if group == self.group and words == self.group_words:
            return
        self.group, self.group_words = group, words
        if group is not None and self.scope_pid is not None and self.scope_pid not in group:
            self.scope_pid = self.scope_tid = None
        self._refresh()

    def _in_group(self, items):
        return list(items) if self.group is None else [item for item in items if item.pid in self.group]

    def open_filter(self) -> None:
        field = self.query_one("#filter", Input)
        field.display = True
        if self.mode != "hot":
            self._switch("hot")
        field.focus()

    def focus_view(self) -> None:
        self.query_one(f"#{self._view_id()}").focus()

    def action_back(self) -> None:
        """Esc. In the open filter box: clear the filter and close the box, nothing else. Elsewhere, back one step:
        call tree or current stacks -> hot frames, then a filter kept with Enter, then thread -> process -> all."""
        field = self.query_one("#filter", Input)
        if field.has_focus or field.display:
            field.value = ""
            field.display = False
            self.filter_text = ""
            self._refresh()
            self.focus_view()
        elif self.mode in ("tree", "now"):
            self._switch("hot")
        elif self.filter_text:
            field.value = ""
            self.filter_text = ""
            self._refresh()
        elif self.scope_tid is not None:
            self.scope_tid = None
            self._refresh()
        elif self.scope_pid is not None:
            self.scope_pid = None
            self._refresh()

    def _view_id(self) -> str:
        return {"hot": "hot", "tree": "calltree", "now": "now"}[self.mode]

    def _switch(self, mode: str) -> None:
        had_focus = self.has_focus_within
        self.mode = mode
        self.query_one(ContentSwitcher).current = self._view_id()
        self._refresh()
        if had_focus or mode != "hot":
            self.focus_view()

    # --- input events -------------------------------------------------------------------------

    def on_resize(self) -> None:
        self._refresh()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.filter_text = event.value.strip()
        self._refresh()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter: the filter stays applied (the header says so; `/` edits it) and the box closes."""
        event.stop()
        self.query_one("#filter", Input).display = False
        self.focus_view()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is None:
            return
        function, file, line = event.row_key.value.split("\0")
        self.drill_key = (function, file, int(line))
        self._switch("tree")

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        if event.control.id != "now":
            return
        event.stop()
        data = event.node.data
        if isinstance(data, tuple) and data[0] == "thread":
            self.scope_pid, self.scope_tid = data[1], data[2]
            self._switch("hot")
        elif isinstance(data, tuple) and data[0] == "process":
            self.scope_to_process(data[1])

    # --- rendering ----------------------------------------------------------------------------

    def show_waiting(self, message: str) -> None:
        self.query_one("#stacks-header", Static).update(Text(message, style="dim"))

    def show(self, frames: Sequence[Frame]) -> None:
        if self._frames and frames and frames[-1].node != self._frames[-1].node:
            self.scope_pid = self.scope_tid = None  # a PID chosen on one node names nothing on another
        self._frames = tuple(frames)
        self._refresh()

    def _view_inputs(self) -> tuple:
        """What the user chose: a change shows at once."""
        # The node shown is chosen too (the selected rank's, across nodes), and two nodes' frames may carry the
        # same numbers.
        node = self._frames[-1].node if self._frames else None
        return (self.mode, self.window_index, self.include_idle, self.by_line, self.filter_text, self.scope_pid,
                self.scope_tid, self.drill_key, self.size, self.group, node)

    def _data_inputs(self) -> tuple:
        """Which data the content comes from: the frames in the window that carry stack counts, and the
        latest dump in the now view. Most ticks bring no new counts (py-spy reports in lumps)."""
        latest = self._frames[-1]
        cutoff = None if self.window_s is None else latest.time - self.window_s
        with_counts = tuple(f.seq for f in self._frames if f.stacks.counts and (cutoff is None or f.time > cutoff))
        threads = latest.stacks.threads if self.mode == "now" else ()
        ages = tuple(int(age) for age in dump_ages(latest).values()) if self.mode == "now" else ()  # they grow
        return (with_counts, threads, ages, latest.stacks.available, latest.stacks.reason, latest.stacks.errors)

    def _refresh(self) -> None:
        """Redraw when what the user chose changed, or when the data did and the last redraw is at least
        DATA_REDRAW_INTERVAL_S old (by frame time): redrawing tables is most of what the screen costs."""
        if not self._frames:
            return
        view_inputs, data_inputs = self._view_inputs(), self._data_inputs()
        now = self._frames[-1].time
        if view_inputs == self._shown_view_inputs:
            if data_inputs == self._shown_data_inputs or now - self._drawn_at < DATA_REDRAW_INTERVAL_S:
                return
        self._shown_view_inputs, self._shown_data_inputs, self._drawn_at = view_inputs, data_inputs, now
        counts = self._in_group(window_counts(self._frames, self.window_s))
        self._idle_in_view = self.include_idle or self._all_idle(counts)
        self.border_title = self._title(counts)
        notes = self._notes(counts)
        header = self.query_one("#stacks-header", Static)
        header.update(notes)
        header.display = bool(notes)
        if self.mode == "hot":
            self._fill_hot(counts)
        elif self.mode == "tree":
            self._fill_call_tree(counts)
        else:
            self._fill_now()

    def _scope_words(self) -> str:
        latest = self._frames[-1]
        if self.scope_pid is None:
            return self.group_words if self.group is not None and self.group_words else "all processes"
        process = latest.process(self.scope_pid)
        role = process_role_words(process) if process else "gone"
        words = f"PID {self.scope_pid} ({role})"
        if self.scope_tid is not None:
            name = next((t.name for t in latest.stacks.threads if t.tid == self.scope_tid and t.name), None)
            words = f"thread {self.scope_tid}{f' {name!r}' if name else ''} of {words}"
        return words

    def _selected_samples(self, counts: Sequence[StackCount]) -> int:
        return sum(c.count for c in self._in_scope(counts))

    def _title(self, counts: Sequence[StackCount]) -> Text:
        """The pane's title line: which view, over what, of whom."""
        parts = [node_title(TITLE, self._frames[-1]),
                 {"hot": "hot frames", "tree": "call tree", "now": "now"}[self.mode]]
        if self.mode != "now":
            parts.append(("all history" if self.window_s is None else duration(self.window_s)) + " (w)")
        parts.append(self._scope_words())
        if self.include_idle or not self._idle_in_view:
            parts.append("idle " + ("shown" if self.include_idle else "hidden") + " (i)")
        else:
            parts.append("all threads idle (i)")
        if self.mode != "now":
            parts.append(f"{self._selected_samples(counts)} samples")
        return Text(" · ".join(parts))  # Text, not str: a thread name must not be read as markup

    def _notes(self, counts: Sequence[StackCount]) -> Text:
        """Lines under the title, only when there is something to say."""
        stacks = self._frames[-1].stacks
        lines = []
        if not stacks.available:
            lines.append(Text(stacks.reason or "stack sampling is not available", style="bold red"))
        elif stacks.errors:
            lines.append(Text(stacks.errors[0], style="yellow"))
        if self.filter_text:
            lines.append(Text(f"filter {self.filter_text!r} (/ edits, esc clears)", style="bold cyan"))
        if self.mode == "hot" and stacks.available:
            idle_share = self._idle_share(counts)
            if not self.include_idle and idle_share == 1.0:
                lines.append(Text("every sampled thread is idle (waiting, sleeping): showing where they wait",
                                  style="yellow"))
            elif not self.include_idle and idle_share >= 0.5:
                lines.append(Text(f"{idle_share:.0%} of samples are idle threads (waiting, sleeping): "
                                  "i shows them", style="yellow"))
            elif not self._selected_samples(counts):
                lines.append(Text("no stack samples in this window yet: py-spy reports every few seconds",
                                  style="dim"))
        return Text("\n").join(lines)

    def _in_scope(self, counts: Sequence[StackCount], include_idle: bool | None = None) -> list[StackCount]:
        """The counts of the chosen process and thread; idle ones as the view shows them (or as asked)."""
        idle = self._idle_in_view if include_idle is None else include_idle
        return select_samples(counts, self.scope_pid, self.scope_tid, idle)

    def _all_idle(self, counts: Sequence[StackCount]) -> bool:
        """Every sampled thread in scope is idle (a hung run): then idle threads are the story."""
        if self.mode == "now":
            threads = select_samples(self._in_group(self._frames[-1].stacks.threads), self.scope_pid)
            return bool(threads) and all(t.idle for t in threads)
        return self._idle_share(counts) == 1.0

    def _idle_share(self, counts: Sequence[StackCount]) -> float:
        scoped = self._in_scope(counts, include_idle=True)
        whole = sum(c.count for c in scoped)
        return sum(c.count for c in scoped if c.idle) / whole if whole else 0.0

    def _fill_hot(self, counts: Sequence[StackCount]) -> None:
        table = self.query_one("#hot", HotTable)
        hot = hot_frames(counts, pid=self.scope_pid, tid=self.scope_tid, include_idle=self._idle_in_view,
                         by_line=self.by_line, limit=HOT_FRAMES_LIMIT)
        if self.filter_text:
            hot = [r for r in hot if matches_filter(r.function, r.file, self.filter_text)]
        function_width, file_width = hot_column_widths(
            table.size.width or self.size.width, max((len(r.function) for r in hot), default=8))
        table.set_columns(function_width, file_width, self.by_line)
        rows = []
        for row in hot:
            busy = row.own_pct >= 10
            rows.append((f"{row.function}\0{row.file}\0{row.line}", (
                Text(f"{row.own_pct:.1f}", style="bold red" if row.own_pct >= 30 else "bold" if busy else "",
                     justify="right"),
                Text(f"{row.total_pct:.1f}", justify="right"),
                Text(clip(row.function, function_width), style="bold" if busy else ""),
                Text(clip_left(short_path(row.file) + (f":{row.line}" if row.line else ""), file_width),
                     style="dim"),
            )))
        sync_rows(table, rows, follow_key=True)

    def _fill_call_tree(self, counts: Sequence[StackCount]) -> None:
        if self.drill_key is None:
            return
        function, file, line = self.drill_key
        callers, callees = drill_counts(self._in_scope(counts), self.drill_key, self.by_line)
        matched = sum(c.count for c in callees)

        def build(root: TreeNode) -> None:
            root.set_label(Text.assemble((frame_label(function, file, line), "bold"),
                                         (f"  in {matched} samples of this window", "dim")))
            for title, subset in (("called from", callers), ("calls", callees)):
                branch = root.add(Text(title, style="bold cyan"), data=(title,), expand=True)
                chosen = call_tree(subset, by_line=self.by_line).children
                if not chosen or not chosen[0].children:
                    branch.add_leaf(Text("(nothing: the frame is outermost)" if title == "called from"
                                         else "(nothing: it runs its own code)", style="dim"))
                    continue
                for child in chosen[0].children:
                    _add_call_node(branch, child, matched, depth=1, path=(title,))

        _rebuild(self.query_one("#calltree", StackTree), build)

    def _fill_now(self) -> None:
        latest = self._frames[-1]
        threads = select_samples(self._in_group(latest.stacks.threads), self.scope_pid,
                                 include_idle=self._idle_in_view)
        by_pid: dict[int, list[ThreadStack]] = {}
        for thread in threads:
            by_pid.setdefault(thread.pid, []).append(thread)

        ages = dump_ages(latest)

        def build(root: TreeNode) -> None:
            sampler = f" by {latest.stacks.sampler}" if latest.stacks.sampler else ""
            label = Text(f"{len(threads)} threads, as last dumped{sampler}", style="bold")
            shown = [ages[pid] for pid in by_pid if pid in ages]
            if shown:
                label.append_text(_age_text(max(shown), "the oldest "))
            label.append(" (enter: a thread's hot frames)", style="bold")
            root.set_label(label)
            for pid, pid_threads in sorted(by_pid.items()):
                process = latest.process(pid)
                role = process_role_words(process) if process else "process"
                process_label = Text(f"PID {pid} {role}", style="bold")
                if pid in ages:
                    process_label.append_text(_age_text(ages[pid], ""))
                process_node = root.add(process_label, data=("process", pid), expand=True)
                for thread in sorted(pid_threads, key=lambda t: (t.idle, t.tid)):
                    state = "idle" if thread.idle else "active"
                    if thread.owns_gil:
                        state += ", holds GIL"
                    label = Text.assemble((f"Thread {thread.tid}", "bold"), f" {thread.name or ''} ",
                                          (f"({state})", "dim" if thread.idle else "green"))
                    thread_node = process_node.add(label, data=("thread", thread.pid, thread.tid), expand=True)
                    for frame in thread.frames:
                        thread_node.add_leaf(_frame_text(frame, self.filter_text))
                    if not thread.frames:
                        thread_node.add_leaf(Text("(no Python frames)", style="dim"))

        _rebuild(self.query_one("#now", StackTree), build)


def dump_ages(frame) -> dict[int, float]:
    """{PID: seconds between its latest dump and the frame}, for the processes whose dumps say when they were taken
    (frame time, not the clock: a replay shows the ages it was recorded with)."""
    ages: dict[int, float] = {}
    for thread in frame.stacks.threads:
        if thread.dumped_at is not None:
            ages[thread.pid] = max(ages.get(thread.pid, 0.0), frame.time - thread.dumped_at)
    return ages


def _age_text(age_s: float, prefix: str) -> Text:
    """", dumped 2 s ago", or, past STALE_DUMP_S, the same in yellow with "stale": no newer dump came."""
    words = f", {prefix}dumped {duration(max(0.0, age_s))} ago"
    if age_s >= STALE_DUMP_S:
        return Text(words + " (stale: no newer dump)", style="bold yellow")
    return Text(words, style="dim")


def _frame_text(frame: StackFrame, highlight: str) -> Text:
    label = frame_label(frame.function, frame.file, frame.line, frame.native)
    text = Text(label, style="magenta" if frame.native else "")
    if highlight and matches_filter(frame.function, frame.file, highlight):
        text.stylize("bold cyan")
    return text


def _add_call_node(parent: TreeNode, node: CallNode, whole: int, depth: int, path: tuple) -> None:
    share = 100.0 * node.total / whole if whole else 0.0
    key = path + (node.key,)
    label = Text.assemble((f"{share:5.1f}% ", "bold" if share >= 10 else ""),
                          frame_label(node.function, node.file, node.line))
    if not node.children:
        parent.add_leaf(label, data=key)
        return
    branch = parent.add(label, data=key, expand=depth < CALL_TREE_OPEN_LEVELS)
    for child in node.children:
        _add_call_node(branch, child, whole, depth + 1, key)


def _walk(node: TreeNode):
    pending = [node]
    while pending:
        current = pending.pop()
        yield current
        pending.extend(current.children)


def _rebuild(tree: Tree, build) -> None:
    """Refill a tree with fresh data, keeping what the user opened, closed and pointed at.

    Nodes are matched by their `data` key; the cursor falls back to its old line when its node is gone.
    """
    expanded = {n.data: n.is_expanded for n in _walk(tree.root) if n.data is not None and n.children}
    cursor = tree.cursor_node
    cursor_key = cursor.data if cursor is not None else None
    cursor_line = tree.cursor_line
    tree.clear()
    tree.root.expand()
    build(tree.root)
    target = None
    for node in _walk(tree.root):
        if node.data in expanded:
            if expanded[node.data]:
                node.expand()
            else:
                node.collapse()
        if cursor_key is not None and node.data == cursor_key:
            target = node

    def restore_cursor() -> None:
        if target is not None:
            tree.move_cursor(target, animate=False)
        elif cursor_line >= 0:
            tree.move_cursor_to_line(min(cursor_line, tree.last_line), animate=False)

    tree.call_after_refresh(restore_cursor)
