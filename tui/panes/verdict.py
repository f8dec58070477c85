"""The Verdict pane (always on top): bottleneck and liveness in words, how sure, since when, the evidence,
the advice, and a short timeline of how the verdict changed while watching."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.visual import visualize
from textual.widgets import Static

from probes.frame import Verdict
from probes.view import MonitorView, Pace, VerdictChange
from probes.view.panes import BadgeTone, facts_named, mfu_percent, printed_percent, shares_summary, support_words
from tui.panes.ranks import SELECTED_MARK, RankRow, rank_label, rank_verdict_words
from tui.panes.text import (
    duration,
    finding_words,
    liveness_words,
    named_by_liveness,
    offset,
    sparkline,
    verdict_name,
    verdict_state,
)

MAX_EVIDENCE_LINES = 3
SHORT_SCREEN_EVIDENCE_LINES = 2  # leaves room for the advice on a 24-row terminal
# Every advice line is shown, the rule's own first: a cap of two once cut the specific fix while a generic line
# kept its slot. What does not fit the pane scrolls, and MORE_BELOW in its title says so (panes have no bottom border).
TITLE = "1 Verdict"
MORE_BELOW = "▼ more below: 1, then j"
TIMELINE_ENTRIES = 4
PACE_SPARKLINE_WIDTH = 12

# Badge colours: red when the run is stuck or gone, else by the tone of its bottleneck (its BottleneckFacts' badge):
# green for the limit a healthy run should have (the GPU), yellow for a limit worth fixing, grey where there is no
# limit to name, dark red for what hides a verdict.
_LIVENESS_STYLE = {"hung": "bold white on red", "exited": "bold white on grey37"}
BADGE_STYLE: dict[BadgeTone, str] = {"healthy": "bold black on green", "worth_fixing": "bold black on yellow",
                                     "neutral": "bold white on grey37", "blind": "bold white on dark_red"}


def verdict_badge(verdict: Verdict) -> Text:
    facts = facts_named(verdict.bottleneck)
    # A name outside the vocabulary (a recording of another version of gputop) reads as a limit worth fixing.
    tone: BadgeTone = facts.badge if facts is not None else "worth_fixing"
    style = _LIVENESS_STYLE.get(verdict.liveness) or BADGE_STYLE[tone]
    return Text(f" {verdict_name(verdict.bottleneck, verdict.liveness)} ", style=style)


def verdict_renderable(view: MonitorView, now: float, max_evidence: int = MAX_EVIDENCE_LINES,
                       selected_rank: RankRow | None = None, *, shares_line: bool | None = None,
                       clip_evidence_from: int | None = None, max_advice: int | None = None) -> Group:
    """Everything the pane says, given the monitor's view and the time to measure "since" against.

    For a distributed job the verdict is the job's: its first line names the rank that holds the others
    back, and the selected rank's own verdict follows in one line.
    Evidence and advice sit in a two-column grid so wrapped lines hang under their text, not the bullet.
    `shares_line` (default: where all the evidence lines show) adds the whole run's time shares;
    `clip_evidence_from` cuts the evidence lines from that one on to a row each; `max_advice` leaves out the advice
    after that many lines and what follows the advice (to measure the rows up to it). The evidence lines after
    `max_evidence` follow the advice: a rule's later lines are often what its advice rests on ("the workers are
    runnable in 80% of their samples yet get 6% CPU each" under "CPU-starved"), and a cap that dropped them left
    the advice with its reason out of reach.
    """
    verdict = view.verdict
    found = finding_words(view.job) if view.job is not None else None
    # A job's first line names the rank first, and is cut rather than wrapped: it carries more than a
    # lone process's, and the lines under it must stay on an 80x24 screen.
    head = Text(no_wrap=True, overflow="ellipsis") if found else Text()
    head.append_text(verdict_badge(verdict))
    if found:
        head.append(f"  {found} ·", style="bold yellow")
    # A verdict named by its liveness ("HUNG") says how long nothing has moved where the liveness would go.
    gap = " " if found else "  "
    state = verdict_state(verdict)
    if state is not None:
        head.append(f"{gap}{state}", style="bold red" if verdict.liveness == "hung" else "bold")
        gap = " · "
    support = support_words(verdict)
    if support is not None:
        head.append(f"{gap}{support}")
    if verdict.since is not None and not named_by_liveness(verdict.bottleneck, verdict.liveness):
        head.append(f" · for {duration(now - verdict.since)}")
    target = view.latest.target
    if not target.alive and target.exited_at is not None:
        head.append(f" · exited {duration(now - target.exited_at)} ago", style="bold")
    lines = Table.grid(padding=(0, 1))
    lines.add_column(width=1)
    lines.add_column(ratio=1)
    for index, line in enumerate(verdict.evidence[:max_evidence]):
        clipped = clip_evidence_from is not None and index >= clip_evidence_from
        lines.add_row(Text("•", style="dim"), Text(line, no_wrap=True, overflow="ellipsis") if clipped else Text(line))
    for line in verdict.advice[:max_advice]:
        lines.add_row(Text("→", style="bold cyan"), Text(line, style="cyan"))
    for line in verdict.evidence[max_evidence:] if max_advice is None else ():
        lines.add_row(Text("•", style="dim"), Text(line))
    if not verdict.evidence and verdict.bottleneck == "unknown" and verdict.liveness != "exited":
        lines.add_row(Text("•", style="dim"),
                      Text("gathering evidence: a verdict needs a few seconds of readings", style="dim"))
    parts: list[RenderableType] = [head]
    if selected_rank is not None:
        parts.append(selected_rank_text(selected_rank, view))
    if view.pace is not None:
        parts.append(pace_text(view.pace))
    if shares_line is None:
        shares_line = max_evidence >= MAX_EVIDENCE_LINES
    if view.shares is not None and len(view.shares.shares) > 1 and shares_line:
        # Where the screen has room: the whole run's time, which the current window's verdict does not show.
        parts.append(Text(shares_summary(view.shares), style="dim", no_wrap=True, overflow="ellipsis"))
    parts.append(lines)
    if len(_changes(view)) > 1 and max_advice is None:  # below the advice: measuring up to it leaves it out
        parts.append(timeline_text(view))
    return Group(*parts)


def fitted_renderable(view: MonitorView, now: float, max_evidence: int, selected_rank: RankRow | None,
                      shares_line: bool, rows_of: Callable[[RenderableType], int], rows: int) -> Group:
    """The pane's text with its first advice line whole within `rows` (`rows_of` measures a renderable at the
    pane's width). An advice line cut mid-sentence behind "more below" was a fix nobody read, so the evidence
    makes room: every line whole if they fit; else the first (the rule's main finding) whole and
    the others cut to a row each, as many as fit; else the lines all cut to a row, as many as fit; else none.
    Each line starts with its point, so a cut one still says it. The rest of the advice scrolls, and under it the
    evidence lines left out above."""

    def drawn(count: int, clip_from: int | None, max_advice: int | None = None) -> Group:
        return verdict_renderable(view, now, count, selected_rank, shares_line=shares_line,
                                  clip_evidence_from=clip_from, max_advice=max_advice)

    if not view.verdict.advice:
        return drawn(max_evidence, None)
    most = min(max_evidence, len(view.verdict.evidence))
    fewer = range(most, 0, -1)
    tries = [(most, None), *((count, 1) for count in fewer), *((count, 0) for count in fewer)]
    for count, clip_from in tries:
        if rows_of(drawn(count, clip_from, max_advice=1)) <= rows:
            return drawn(count, clip_from)
    return drawn(0, None)


def selected_rank_text(row: RankRow, view: MonitorView) -> Text:
    """The selected rank's own verdict in one line: its words, then its first piece of evidence."""
    finding = view.job.finding if view.job is not None else None
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"{SELECTED_MARK} {rank_label(row)}: ", style="bold")
    text.append(rank_verdict_words(row, finding), style="bold yellow" if row.responsible else "")
    if row.verdict is not None and row.verdict.evidence:
        text.append(f" · {row.verdict.evidence[0]}", style="dim")
    return text


def _seconds(value: float) -> str:
    """21.0, 2.35, 0.305: the decimal of 21.0 kept, three figures below ten."""
    return f"{value:.1f}" if value >= 10 else f"{value:.3g}"


def _tokens(per_s: float) -> str:
    if per_s >= 1e6:
        return f"{per_s / 1e6:.3g}M tok/s"
    return f"{per_s / 1000:.3g}k tok/s" if per_s >= 10_000 else f"{per_s:,.0f} tok/s"


def _flops(per_s: float) -> str:
    for scale, unit in ((1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s")):
        if per_s >= scale:
            return f"{per_s / scale:.3g} {unit}"
    return f"{per_s / 1e6:.3g} MFLOP/s"


def pace_text(pace: Pace) -> Text:
    """The job's own pace in one line: iteration, s/iter and its recent trend, tokens/s, achieved
    TFLOP/s, corrected MFU beside the one the log printed, and the share of the reference step's rate."""
    if pace.seconds_per_iter is None and pace.hint:  # "no pace: why", naming itself
        return Text(pace.hint, style="dim", no_wrap=True, overflow="ellipsis")
    text = Text("pace ", style="bold")
    if pace.seconds_per_iter is None:
        text.append("the log has printed no iteration time yet", style="dim")
        return text
    if pace.iteration is not None:
        text.append(f"iter {pace.iteration:,} · ")
    text.append(f"{_seconds(pace.seconds_per_iter)} s/iter", style="bold")
    if pace.printed_seconds_per_iter is not None:  # the counter was trusted over the printed time: say so
        text.append(f" (step counter; the log prints {_seconds(pace.printed_seconds_per_iter)} s)", style="dim")
    elif pace.derived_from is not None:
        text.append(f" (from {pace.derived_from})", style="dim")
    if len(pace.recent_seconds_per_iter) > 1:
        text.append(" " + sparkline(pace.recent_seconds_per_iter, PACE_SPARKLINE_WIDTH, None), style="cyan")
    if pace.tokens_per_s:
        text.append(f" · {_tokens(pace.tokens_per_s)}")
    compared = pace.comparison
    if compared is not None and compared.achieved_flops_per_s:
        text.append(f" · {_flops(compared.achieved_flops_per_s)}")
    if pace.reported_tflops_per_gpu is not None:  # Megatron-LM prints achieved TFLOP/s per GPU, not an MFU
        beside = compared is not None and compared.achieved_flops_per_s
        said = f"log {pace.reported_tflops_per_gpu:g} TFLOP/s/GPU"
        text.append(f" ({said})" if beside else f" · {said}", style="dim")
    if compared is not None and compared.corrected_mfu_pct is not None:
        text.append(f" · MFU {mfu_percent(compared.corrected_mfu_pct)}%", style="bold")
    if pace.reported_mfu_pct is not None:  # the evidence says why they differ; with the log's own decimals
        text.append(f" (log {printed_percent(pace.reported_mfu_pct)}%)", style="dim")
    if compared is not None and compared.compute_bound_pct is not None and compared.reference_seconds_per_iter:
        reference = _seconds(compared.reference_seconds_per_iter)
        kind = "" if compared.reference_compiled is None else "compiled " if compared.reference_compiled else "eager "
        text.append(f" · {compared.compute_bound_pct:.0f}% of the {kind}reference's rate ({reference} s)")
    return text


def _changes(view: MonitorView) -> tuple[VerdictChange, ...]:
    """The timeline without its opening "no verdict yet" stretch, which every run starts with."""
    timeline = view.timeline
    while timeline and timeline[0].bottleneck == "unknown" and timeline[0].liveness == "unknown":
        timeline = timeline[1:]
    return timeline


def timeline_text(view: MonitorView) -> Text:
    """The last few verdict changes, as offsets since watching began."""
    changes = _changes(view)
    text = Text("timeline ", style="dim")
    shown = changes[-TIMELINE_ENTRIES:]
    if len(changes) > len(shown):
        text.append("… ", style="dim")
    for index, change in enumerate(shown):
        if index:
            text.append(" → ", style="dim")
        text.append(offset(change.time - (view.first_time or change.time)), style="dim")
        name = verdict_name(change.bottleneck, change.liveness)
        text.append(f" {name}")
        if change.liveness in ("hung", "exited") and name != liveness_words(change.liveness):
            text.append(f" ({liveness_words(change.liveness)})", style="bold")
    return text


class VerdictPane(VerticalScroll):
    """Scrollable when the evidence is longer than the room; focus it (1) to scroll with j/k."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "scroll_down", "Scroll down", show=False),
        Binding("k", "scroll_up", "Scroll up", show=False),
    ]

    def __init__(self) -> None:
        super().__init__(id="verdict", classes="pane")
        self.border_title = TITLE
        # What was last shown, drawn again when the pane's size changes: the text is fitted to its rows.
        self._shown: tuple[MonitorView, float, RankRow | None] | None = None

    def compose(self):
        yield Static(id="verdict-text")

    def on_mount(self) -> None:
        self.watch(self, "scroll_y", lambda _: self.mark_overflow(), init=False)

    def on_resize(self) -> None:
        if self._shown is not None:
            self.show(*self._shown)
        self.call_after_refresh(self.mark_overflow)

    def mark_overflow(self) -> None:
        """MORE_BELOW in the title while lines are hidden below; gone once scrolled to the end."""
        more = self.max_scroll_y > 0 and self.scroll_y < self.max_scroll_y
        title = f"{TITLE} · {MORE_BELOW}" if more else TITLE
        if self.border_title != title:
            self.border_title = title

    def show_waiting(self, message: str) -> None:
        self._shown = None
        self.query_one("#verdict-text", Static).update(Text(message, style="dim"))
        self.call_after_refresh(self.mark_overflow)

    def show(self, view: MonitorView, now: float, selected_rank: RankRow | None = None) -> None:
        self._shown = (view, now, selected_rank)
        short = self.screen.has_class("-short")
        max_evidence = SHORT_SCREEN_EVIDENCE_LINES if short else MAX_EVIDENCE_LINES
        # The room the text has: the pane's rows, and its width less a scrollbar (there is one whenever the text
        # is longer than the pane, which is when the fit matters). None before the first layout.
        width = self.content_region.width - self.styles.scrollbar_size_vertical
        rows = self.content_region.height
        static = self.query_one("#verdict-text", Static)
        if width > 0 and rows > 0:

            def rows_of(renderable: RenderableType) -> int:
                # Measured as the Static will draw it (Textual wraps a Text as its own Content, not as Rich does);
                # Widget.get_content_height passes its styles as the rules just so.
                return visualize(static, renderable).get_height(static.styles, width)  # type: ignore[arg-type]

            text = fitted_renderable(view, now, max_evidence, selected_rank, not short, rows_of, rows)
            # The height is set, not left to Textual's auto height: that kept a longer text's height after the fitted
            # one replaced it (seen at 80x24 under Python 3.12, 9 rows for 7, so a scrollbar and "more below" came and
            # went with the Python version).
            static.styles.height = rows_of(text)
        else:
            text = verdict_renderable(view, now, max_evidence, selected_rank, shares_line=not short)
            static.styles.height = "auto"
        static.update(text)
        self.call_after_refresh(self.mark_overflow)
