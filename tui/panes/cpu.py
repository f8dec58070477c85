"""The CPU pane: the target's process tree with roles (main, DataLoader workers, compile workers, ...),
CPU%, threads and state; the cgroup's quota, usage, throttled share and pressure; and a warning when more
threads want to run than there are CPUs to run them. `enter` on a process shows its stacks."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Static

from probes.frame import CpuReading, Frame, ProcessSample
from probes.view.panes import others_busy_cpus
from tui.panes.tables import FittedTable, sync_rows
from tui.panes.text import clip, node_title, percent, process_role_words, size

# (heading, width, right-aligned); the command column takes whatever room is left.
PROCESS_COLUMNS = (("PID", 7, False), ("role", 19, False), ("CPU%", 5, True), ("run/thr", 7, True),
                   ("state", 10, False), ("RSS", 9, True))
# DataTable pads each cell by one column either side; the vertical scrollbar takes two more.
TABLE_CHROME = 2 * (len(PROCESS_COLUMNS) + 1) + 2
MIN_COMMAND_WIDTH = 10
TITLE = "3 CPU"


def tree_order(processes: Sequence[ProcessSample], root_pid: int) -> list[tuple[int, ProcessSample]]:
    """(depth, process) in depth-first order from the target; processes whose parent is not in the
    tree (re-parented after a crash) follow at depth 1."""
    by_parent: dict[int | None, list[ProcessSample]] = {}
    for process in processes:
        by_parent.setdefault(process.ppid, []).append(process)
    ordered: list[tuple[int, ProcessSample]] = []
    seen: set[int] = set()
    # An explicit stack rather than a recursive inner function: that one would be a reference cycle (the
    # function holds itself through its closure), left with this tick's tables for the cycle collector.
    root = next((p for p in processes if p.pid == root_pid), None)
    # Popped from the end: the root first, then the strays by PID; each one's children before its next sibling.
    pending = [(1, process) for process in sorted(processes, key=lambda p: p.pid, reverse=True)]
    if root is not None:
        pending.append((0, root))
    while pending:
        depth, process = pending.pop()
        if process.pid in seen:
            continue
        seen.add(process.pid)
        ordered.append((depth, process))
        children = sorted(by_parent.get(process.pid, []), key=lambda p: p.pid, reverse=True)
        pending += [(depth + 1, child) for child in children]
    return ordered


def _command(process: ProcessSample) -> str:
    if process.cmdline:
        return " ".join(part.rsplit("/", 1)[-1] if i == 0 else part for i, part in enumerate(process.cmdline))
    return process.name


def command_width(available: int) -> int:
    """Room for the command column, or 0 when too little is left to be worth showing."""
    room = available - TABLE_CHROME - sum(width for _, width, _ in PROCESS_COLUMNS)
    return room if room >= MIN_COMMAND_WIDTH else 0


def process_row(depth: int, process: ProcessSample, command_room: int) -> tuple[Text, ...]:
    dim = "" if process.alive else "dim"
    indent = "  " * max(0, depth - 1) + ("└ " if depth else "")
    threads = "-" if process.num_threads is None else str(process.num_threads)
    runnable = "-" if process.runnable_threads is None else str(process.runnable_threads)
    state = (process.state or "-") if process.alive else "exited"
    cpu_style = "bold" if (process.cpu_pct or 0) >= 90 else ""
    cells = (
        Text(str(process.pid), style=dim),
        Text(indent + process_role_words(process), style=dim or ("bold" if depth == 0 else "")),
        Text(percent(process.cpu_pct), style=dim or cpu_style, justify="right"),
        Text(f"{runnable}/{threads}", style=dim, justify="right"),
        Text(state, style=dim or ("bold yellow" if state == "disk-sleep" else "")),
        Text(size(process.rss_bytes), style=dim, justify="right"),
    )
    return (*cells, Text(clip(_command(process), command_room), style="dim")) if command_room else cells


def cpu_summary(cpu: CpuReading) -> Text:
    """One line on the CPUs the target may use and gets (it goes in the pane's title)."""
    text = Text()
    effective = "-" if cpu.effective_cpus is None else f"{cpu.effective_cpus:g}"
    text.append(f"CPUs {effective}")
    limits = []
    if cpu.quota_cpus is not None:
        limits.append(f"quota {cpu.quota_cpus:g}")
    elif cpu.cgroup_version is not None:
        limits.append("no quota")
    if cpu.affinity_cpus is not None:
        limits.append(f"affinity {cpu.affinity_cpus}")
    if limits:
        text.append(f" ({', '.join(limits)})")
    if cpu.usage_cpus is not None:
        text.append(f" · using {cpu.usage_cpus:.1f}")
    if cpu.throttled_fraction is not None:
        throttled = cpu.throttled_fraction * 100
        text.append(" · throttled ")
        text.append(f"{throttled:.0f}%", style="bold red" if throttled >= 10 else "")
    if cpu.pressure_some_avg10 is not None:
        text.append(f" · pressure {cpu.pressure_some_avg10:.0f}%")
    return text


def cpu_notes(frame: Frame) -> Text:
    """Warnings: more threads want to run than there are CPUs; other processes take the job's CPUs.
    Then why a reading is missing."""
    cpu, host = frame.cpu, frame.host
    lines = []
    others = others_busy_cpus(frame)
    if others is not None and host.allowed_cpus and others >= 0.5:
        stolen = f", steal {host.steal_pct:.0f}%" if host.steal_pct else ""
        lines.append(Text(f"⚠ other processes use {others:.1f} of the {host.allowed_cpus} CPUs it may run on"
                          f"{stolen}", style="bold yellow"))
    if (cpu.runnable_threads is not None and cpu.effective_cpus is not None
            and cpu.runnable_threads > cpu.effective_cpus):
        lines.append(Text(f"⚠ {cpu.runnable_threads} runnable threads > {cpu.effective_cpus:g} CPUs: "
                          "threads wait for a core", style="bold yellow"))
    if cpu.reason:
        lines.append(Text(cpu.reason, style="dim"))
    return Text("\n").join(lines)


class ProcessTable(FittedTable):
    """The process tree, one row a process; the command takes the room that is left."""


class CpuPane(Vertical):
    """Holds the cgroup summary over the process table; remembers the selected PID across refreshes."""

    class ProcessChosen(Message):
        """The user pressed enter (or clicked) on a process: show its stacks."""

        def __init__(self, pid: int) -> None:
            super().__init__()
            self.pid = pid

    def __init__(self) -> None:
        super().__init__(id="cpu", classes="pane")
        self.border_title = TITLE
        self._frame: Frame | None = None
        self._shown_notes: Text | None = None
        self._group: tuple[frozenset[int] | None, int | None, str | None] = (None, None, None)

    def compose(self):
        yield Static(id="cpu-notes")
        yield ProcessTable(id="processes", cursor_type="row")

    def on_resize(self) -> None:
        if self._frame is not None:
            self.show(self._frame, *self._group)

    def show_waiting(self, message: str) -> None:
        self._shown_notes = Text(message, style="dim")
        self.query_one("#cpu-notes", Static).update(self._shown_notes)

    def show(self, frame: Frame, group: frozenset[int] | None = None, group_root: int | None = None,
             group_words: str | None = None) -> None:
        """The frame's process tree; with `group` (a rank and its workers), only those processes, from
        `group_root` down, and `group_words` in the title saying so."""
        self._group = (group, group_root, group_words)
        scope = f" · {group_words}" if group_words else ""
        self.border_title = Text.assemble(node_title(TITLE, frame), scope, " · ", cpu_summary(frame.cpu))
        notes = cpu_notes(frame)
        if notes != self._shown_notes:
            self._shown_notes = notes
            self.query_one("#cpu-notes", Static).update(notes)
            self.query_one("#cpu-notes", Static).display = bool(notes)
        self._frame = frame
        table = self.query_one(ProcessTable)
        command_room = command_width(table.size.width or self.size.width)
        table.fit_columns(PROCESS_COLUMNS, "command", command_room)
        processes, root = frame.processes, frame.target.pid
        if group is not None:
            processes = tuple(p for p in processes if p.pid in group)
            root = group_root if group_root is not None else root
        sync_rows(table, [(str(process.pid), process_row(depth, process, command_room))
                          for depth, process in tree_order(processes, root)], follow_key=True)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(self.ProcessChosen(int(event.row_key.value)))
