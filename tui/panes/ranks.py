"""The Ranks pane, shown only for a distributed job: one row per rank on this node (rank, local rank, PID, GPU,
CPU%, the share of its samples spent waiting for the other ranks, its own verdict in a few words), the rank
that holds the others back in bold; below them, the ranks of the world with no process here, in the words of
probes/diagnosis/absent_ranks.py (exited by a time where gputop saw it run, not running, gone before gputop
attached, or not on this node). The selected rank (`[` / `]`, or enter on a row) scopes the CPU and
Stacks panes to it and its workers; the pure helpers below say which rows, words and processes that means.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable

from probes.frame import ROLE_RANK, Frame, JobFinding, JobInfo, JobVerdict, RankVerdict, Verdict
from probes.view import MonitorView
from probes.view.panes import ELSEWHERE_WORDS, SeenRunning, missing_rank_words, ranges_text, ranks_seen_gone
from tui.panes.tables import FittedTable, sync_rows
from tui.panes.text import bottleneck_words, clip, named_by_liveness, percent

TITLE = "5 Ranks"
# (heading, width, right-aligned); the verdict column takes whatever room is left.
RANK_COLUMNS = (("rank", 5, True), ("local", 5, True), ("PID", 7, True), ("GPU", 3, True), ("CPU%", 5, True),
                ("waits", 5, True))
# A job merged across nodes (probes/monitoring/cluster.py) shows each rank's node after its number.
NODE_COLUMN = ("node", 8, False)
RANK_COLUMNS_ACROSS_NODES = (RANK_COLUMNS[0], NODE_COLUMN, *RANK_COLUMNS[1:])
# DataTable pads each cell by one column either side; the vertical scrollbar takes two more.
TABLE_CHROME = 2 * (len(RANK_COLUMNS) + 1) + 2
MIN_VERDICT_WIDTH = 12
# A rank waiting this share of its samples for the others says so before its own bottleneck.
WAITING_RATIO = 0.5
SELECTED_MARK = "▶"
# Rows of ranks with no process here (the job knows its world size): keyed apart from the PIDs of real rows.
ABSENT_KEY = "absent:"
# The row that stands for a group of agreeing ranks (probes.monitoring.cluster.agreeing_ranks), under the group's
# first rank.
GROUP_KEY = "group:"


@dataclass(frozen=True)
class RankRow:
    """One rank as the table shows it: its RankVerdict where the job has one, else its process alone."""

    pid: int
    rank: int | None
    local_rank: int | None = None
    gpu_index: int | None = None
    cpu_pct: float | None = None
    collective_wait_ratio: float | None = None
    verdict: Verdict | None = None
    alive: bool = True
    responsible: bool = False  # the rank the job verdict names
    node: str | None = None  # its node, in a job merged across nodes (its pid is that node's own)

    @property
    def key(self) -> str:
        """What names this rank in the table and in the selection: its PID, with its node where PIDs of several
        nodes share the table (each node is its own PID namespace: two nodes' ranks may have one PID)."""
        return rank_key(self.pid, self.node)


def rank_key(pid: int, node: str | None = None) -> str:
    return str(pid) if node is None else f"{pid}@{node}"


def pid_of_key(key: str) -> int:
    return int(key.split("@")[0])


def rank_rows(view: MonitorView) -> list[RankRow]:
    """The job's ranks, by rank: from the job verdict when there is one (each rank's own verdict and wait
    share), else from the latest frame's rank processes (before a verdict, or on a build without one).
    Empty for a lone process or a launched one, whose screen has no rank table."""
    frame = view.shown
    if frame.job is not None and frame.job.kind == "launched":  # one training process, no ranks to compare
        return []
    job = view.job
    if job is not None and job.ranks:
        return [_row_from_verdict(rank, frame, job) for rank in sorted(job.ranks, key=lambda r: r.rank)]
    ranks = [p for p in frame.processes if p.role == ROLE_RANK]
    return [RankRow(pid=p.pid, rank=p.rank, local_rank=p.local_rank, gpu_index=p.gpu_index, cpu_pct=p.cpu_pct,
                    alive=p.alive)
            for p in sorted(ranks, key=lambda p: (p.rank is None, p.rank or 0, p.pid))]


def _row_from_verdict(rank: RankVerdict, frame: Frame, job: JobVerdict) -> RankRow:
    if rank.node is not None and rank.node != frame.node:  # another node's rank: its own verdict says it all
        process, alive = None, rank.verdict.liveness != "exited"
    else:
        process = frame.process(rank.pid)
        alive = process is not None and process.alive and rank.verdict.liveness != "exited"
    return RankRow(pid=rank.pid, rank=rank.rank, local_rank=rank.local_rank, gpu_index=rank.gpu_index,
                   cpu_pct=rank.cpu_pct if rank.cpu_pct is not None else (process.cpu_pct if process else None),
                   collective_wait_ratio=rank.collective_wait_ratio, verdict=rank.verdict, alive=alive,
                   responsible=job.responsible_rank is not None and job.responsible_rank == rank.rank,
                   node=rank.node)


def absent_ranks(job: JobInfo | None, frames: Sequence[Frame] = (), seen: SeenRunning | None = None
                 ) -> list[tuple[str, str]]:
    """(rank or range of ranks, words) for each rank of the world with no process on this node: those this node
    should hold, as `frames` (the history shown, oldest first) and `seen` (the Monitor's record of when ranks were
    last seen running, which outlives the history) measured them ("exited by 12:00:05", "not running",
    "gone (exited before attach)": absent_ranks.missing_rank_words), and those on other nodes ("not on this
    node"). A job merged across nodes has its own rows (MonitorView.absent_across_nodes)."""
    if job is None:
        return []
    gone = ranks_seen_gone(frames, job.missing_ranks, seen) if job.missing_ranks else {}
    return ([(str(rank), missing_rank_words(job, rank, gone)) for rank in job.missing_ranks]
            + [(ranges_text([span]), ELSEWHERE_WORDS) for span in job.ranks_elsewhere])


def absent_cells(rank: str, words: str, verdict_room: int, nodes: bool = False,
                 node: str | None = None) -> tuple[Text, ...]:
    """A rank no process stands for: its number, the node that reported it (across nodes), dashes, its words."""
    style = "dim" if words == ELSEWHERE_WORDS else "bold red"  # a rank this node should hold and does not
    dash = Text("-", style=style, justify="right")
    where = (Text(node or "-", style=style),) if nodes else ()
    return (Text(rank, style=style, justify="right"), *where, *([dash] * 5),
            Text(clip(words, verdict_room), style=style))


def group_cells(group, verdict_room: int) -> tuple[Text, ...]:
    """The row of a probes.monitoring.cluster.RankGroup: how many ranks, their nodes, and which rank they are like."""
    dash = Text("-", style="dim", justify="right")
    cpus = [r.cpu_pct for r in group.others if r.cpu_pct is not None]
    waits = group.waits
    # The rank column says how many (+18); the rank they are like first, where the column is narrow.
    words = f"like rank {group.like.rank}: {group.ranks_text}"
    if waits is not None:
        words += f", waits {waits[0]:.0%}" + (f"–{waits[1]:.0%}" if waits[1] > waits[0] else "")
    return (Text(f"+{len(group.others)}", style="dim", justify="right"),
            Text(clip(group.nodes_text or "-", NODE_COLUMN[1]), style="dim"), dash, dash, dash,
            Text(percent(sum(cpus) / len(cpus)) if cpus else "-", style="dim", justify="right"),
            Text(f"{waits[1]:.0%}" if waits is not None else "-", style="dim", justify="right"),
            Text(clip(words, verdict_room), style="dim"))


def short_bottleneck_words(bottleneck: str) -> str:
    """The bottleneck's words without their parenthesis ("compiling", not "compiling (warm-up)"):
    a rank's row has a few columns of room, and the verdict pane above says it in full."""
    return bottleneck_words(bottleneck).split(" (")[0]


def rank_verdict_words(row: RankRow, finding: JobFinding | None) -> str:
    """A rank's verdict in a few words: "straggler: host-CPU-bound", "waits 85%", "hung", "exited"."""
    verdict = row.verdict
    if not row.alive or (verdict is not None and verdict.liveness == "exited"):
        return "exited"
    if verdict is None:
        return "-"
    waits = row.collective_wait_ratio
    if verdict.liveness == "hung":
        if row.responsible and finding == "hung_rank":
            if named_by_liveness(verdict.bottleneck, verdict.liveness):  # no cause named: "hung" says it all
                return "hung: the others wait for it"
            return f"hung: the others wait for it ({short_bottleneck_words(verdict.bottleneck)})"
        return f"hung, waiting {waits:.0%} in collectives" if waits is not None and waits >= WAITING_RATIO \
            else "hung"
    if row.responsible and finding == "straggler":
        return f"straggler: {short_bottleneck_words(verdict.bottleneck)}"
    if waits is not None and waits >= WAITING_RATIO:
        return f"waits {waits:.0%} for the others"
    return short_bottleneck_words(verdict.bottleneck)


def rank_label(row: RankRow, with_node: bool = True) -> str:
    """'rank 1 (PID 12)', or 'rank 1 on n2 (PID 12)' in a job merged across nodes (with_node False: a pane
    whose title names the node already)."""
    where = f" on {row.node}" if row.node is not None and with_node else ""
    return f"rank {row.rank}{where} (PID {row.pid})" if row.rank is not None else f"PID {row.pid}{where}"


def rank_group(frames: Sequence[Frame], rank_pid: int) -> frozenset[int]:
    """The rank and the processes that work for it (its DataLoader and compile workers: owner_pid), over
    every frame shown, so a worker that ended earlier in the window still counts as the rank's."""
    pids = {rank_pid}
    for frame in frames:
        pids.update(p.pid for p in frame.processes if p.owner_pid == rank_pid)
    return frozenset(pids)


def verdict_width(available: int, columns: Sequence[tuple[str, int, bool]] = RANK_COLUMNS) -> int:
    chrome = 2 * (len(columns) + 1) + 2
    return max(MIN_VERDICT_WIDTH, available - chrome - sum(width for _, width, _ in columns))


def rank_cells(row: RankRow, finding: JobFinding | None, selected: bool, verdict_room: int,
               nodes: bool = False) -> tuple[Text, ...]:
    dim = "" if row.alive else "dim"
    strong = "bold yellow" if row.responsible else ""
    rank = "-" if row.rank is None else str(row.rank)
    waits = "-" if row.collective_wait_ratio is None else f"{row.collective_wait_ratio:.0%}"
    node = (Text(clip(row.node or "-", NODE_COLUMN[1]), style=dim or strong),) if nodes else ()
    return (
        Text(f"{SELECTED_MARK + ' ' if selected else ''}{rank}", style=dim or ("bold" if selected else strong),
             justify="right"),
        *node,
        Text("-" if row.local_rank is None else str(row.local_rank), style=dim, justify="right"),
        Text(str(row.pid), style=dim, justify="right"),
        Text("-" if row.gpu_index is None else str(row.gpu_index), style=dim, justify="right"),
        Text(percent(row.cpu_pct), style=dim, justify="right"),
        Text(waits, style=dim, justify="right"),
        Text(clip(rank_verdict_words(row, finding), verdict_room), style=dim or strong),
    )


class RankTable(FittedTable):
    """One row a rank; the rank's verdict takes the room that is left."""

    # The columns last laid out: the node column comes and goes with ranks on other nodes.
    _columns_shown: Sequence[tuple[str, int, bool]] = RANK_COLUMNS

    # The selected rank carries a mark; the row cursor shows only while the table has focus (5), where
    # j/k move it and enter selects, so it is never mistaken for the selection.
    def on_focus(self) -> None:
        self.show_cursor = True

    def on_blur(self) -> None:
        self.show_cursor = False


class RanksPane(Vertical):
    """Hidden unless the view has ranks; remembers nothing itself: the app owns the selection."""

    class RankChosen(Message):
        """Enter (or a click) on a rank's row: select it, by its RankRow.key."""

        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    def __init__(self) -> None:
        super().__init__(id="ranks", classes="pane")
        self.border_title = TITLE
        self._shown: tuple | None = None

    def compose(self):
        table = RankTable(id="ranks-table", cursor_type="row")
        table.show_cursor = False
        yield table

    def on_resize(self) -> None:
        if self._shown is not None:
            self.show(*self._shown)

    def show(self, rows: Sequence[RankRow], job: JobVerdict | None, selected_key: str | None,
             kind: str | None = None, absent: Sequence[tuple[str, str] | tuple[str, str, str | None]] = (),
             groups: Sequence = ()) -> None:
        """groups: probes.monitoring.cluster.RankGroup of a job of many ranks: each group's other ranks are one row,
        under
        its first rank's."""
        self._shown = (rows, job, selected_key, kind, absent, groups)
        self.display = bool(rows)
        if not rows:
            return
        selected = next((row for row in rows if row.key == selected_key), None)
        every = "agreeing ranks summarised" if groups else "all shown"
        scope = f"{rank_label(selected)} selected ([ ] other ranks)" if selected else \
            f"{len(rows)} ranks, {every} ([ ] selects one)"
        self.border_title = Text.assemble(TITLE, f" · {kind or 'job'} · {scope}")
        table = self.query_one(RankTable)
        nodes = any(row.node is not None for row in rows)
        columns = RANK_COLUMNS_ACROSS_NODES if nodes else RANK_COLUMNS
        room = verdict_width(table.size.width or self.size.width, columns)
        if table._columns_shown != columns:
            table._columns_shown, table._last_room = columns, None  # the node column comes or goes: rebuild
        table.fit_columns(columns, "verdict", room)
        finding = job.finding if job is not None else None
        folded = {rank_key(r.pid, r.node) for group in groups for r in group.others}
        under = {rank_key(group.like.pid, group.like.node): group for group in groups}
        cells = []
        for row in rows:
            if row.key in folded:
                continue
            cells.append((row.key, rank_cells(row, finding, row.key == selected_key, room, nodes)))
            if row.key in under:
                cells.append((f"{GROUP_KEY}{row.key}", group_cells(under[row.key], room)))
        cells += [(f"{ABSENT_KEY}{row[0]}", absent_cells(row[0], row[1], room, nodes, row[2] if len(row) > 2 else None))
                  for row in absent]
        sync_rows(table, cells, follow_key=False)
        if selected is not None and not table.has_focus:
            table.move_cursor(row=[key for key, _ in cells].index(selected.key), animate=False, scroll=True)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None and not event.row_key.value.startswith((ABSENT_KEY, GROUP_KEY)):
            self.post_message(self.RankChosen(event.row_key.value))
