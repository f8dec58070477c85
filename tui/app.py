"""The gputop screen: one Textual app for live monitoring, replays and the demo.

`make_app()` is the single factory the CLI and the tests use: it picks where the views come from
(tui/view_sources.py: a process watched live, a job merged across nodes, or a recording) and the app reads
them all alike. Live, a thread worker runs the source, which posts one `FrameArrived` message per immutable
`MonitorView`; the UI thread only renders what arrives, so a slow py-spy or GPU driver never freezes the
screen.

A replay is folded at start-up and shows the end state at once (all at once, not at the recorded pace: the
screen is deterministic, which tests and screenshots need; the verdict timeline still tells how the run
changed). "Since" texts are measured against `clock()`: wall time live, the last frame's time in a replay, or
whatever a test freezes.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer
from textual.worker import get_current_worker

from probes.doctor import Check
from probes.frame import Frame
from probes.monitoring import (
    SUMMARY_MIN_RANKS,
    AgentStreams,
    ClusterMonitor,
    Engine,
    Monitor,
    RankGroup,
    agreeing_ranks,
    recording_meta,
)
from probes.outputs import Recorder
from probes.reference import ComparisonInputs
from probes.view import MonitorProtocol, MonitorView
from tui import header
from tui.exitcodes import EXIT_INTERRUPTED, EXIT_OK
from tui.export import save_snapshot, snapshots_dir
from tui.header import JobNote, StatusBar
from tui.panes.cpu import CpuPane
from tui.panes.gpu import GpuPane
from tui.panes.help import HelpScreen
from tui.panes.ranks import RankRow, RanksPane, absent_ranks, pid_of_key, rank_group, rank_label, rank_rows
from tui.panes.stacks import HotTable, StacksPane
from tui.panes.verdict import VerdictPane
from tui.rank_choice import RankChoice
from tui.view_sources import ClusterSource, LiveSource, ReplaySource, ViewSource

WIDE_LAYOUT_MIN_COLUMNS = 140
SHORT_LAYOUT_MAX_ROWS = 32
SAMPLER_STOP_TIMEOUT_S = 10.0
CLOCK_TEXT_REFRESH_S = 1.0


class FrameArrived(Message):
    """One new frame, with the history and verdict it produced."""

    def __init__(self, view: MonitorView) -> None:
        super().__init__()
        self.view = view


class SamplingStopped(Message):
    """The sampling loop ended by itself: the target exited (error None), or a probe failed."""

    def __init__(self, error: str | None) -> None:
        super().__init__()
        self.error = error


class FlightRecorderAsked(Message):
    """What a request for a Flight Recorder dump (`f`, --fr-dump) did, rank by rank, or a dump that came of it."""

    def __init__(self, lines: list[tuple[str, bool]]) -> None:
        super().__init__()
        self.lines = lines  # (line, whether it is a problem)


def rank_scope_words(row: RankRow, group: frozenset[int]) -> str:
    """What the CPU and Stacks panes are scoped to: "rank 1 (PID 12) + 2 workers" (their titles name the node)."""
    workers = len(group) - 1
    return rank_label(row, with_node=False) + (f" + {workers} worker{'s' if workers != 1 else ''}" if workers else "")


class GputopApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "gputop"
    ENABLE_COMMAND_PALETTE = False

    # Keys that work only while the view has a job with ranks: the footer and the help show them only then.
    JOB_BINDINGS: ClassVar[list[Binding]] = [
        Binding("right_square_bracket", "next_rank", "Rank", key_display="[ ]",
                tooltip="Select the next / previous rank, then all ranks again: CPU and Stacks show only that "
                "rank and its workers, Verdict its own verdict under the job's"),
        Binding("left_square_bracket", "previous_rank", "Rank", show=False),
        Binding("5", "focus_pane('ranks')", "Ranks", show=False, key_display="5",
                tooltip="Go to the Ranks pane: j / k move, enter selects that rank"),
    ]

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit", tooltip="Quit gputop (the target keeps running)"),
        Binding("ctrl+c", "interrupt", "Quit", show=False, priority=True),  # quits too, exit status 130
        Binding("question_mark", "help", "Help", key_display="?", tooltip="Show every key"),
        *JOB_BINDINGS,
        Binding("p", "pause", "Pause", tooltip="Freeze the view; sampling and recording continue"),
        Binding("s", "save", "Save", tooltip="Save a snapshot (JSON) and a screenshot (SVG) in ~/.local/state/gputop"),
        Binding("1", "focus_pane('verdict')", "Verdict", show=False, key_display="1 2 3 4",
                tooltip="Go to the Verdict, GPU, CPU or Stacks pane"),
        Binding("2", "focus_pane('gpu')", "GPU", show=False),
        Binding("3", "focus_pane('cpu')", "CPU", show=False),
        Binding("4", "focus_pane('stacks')", "Stacks", show=False),
        Binding("slash", "filter", "Filter", key_display="/",
                tooltip="Filter hot frames by function or file (esc clears)"),
        Binding("i", "toggle_idle", "Idle", tooltip="Show or hide idle threads (waiting, sleeping) in stacks"),
        Binding("w", "cycle_window", "Window", tooltip="Change the window hot frames are summed over"),
        Binding("d", "toggle_now", "Now", tooltip="Each thread's current stack (like py-spy dump) / hot frames"),
        Binding("l", "toggle_lines", "Lines", show=False,
                tooltip="Hot frames per function, or per line (file:line)"),
        Binding("n", "native", "Native", tooltip="Native (C/C++) frames: needs a restart with --native"),
        Binding("f", "flight_recorder_dump", "FR dump", show=False,
                # NCCL's debug-info pipe written once per rank, a worker server read now
                # (probes/sensors/flight_recorder.py)
                tooltip="Flight Recorder dump: ask the ranks whose job enabled one"),
    ]

    def __init__(self, *, source: ViewSource, clock: Callable[[], float] | None,
                 save_dir: str | Path | None) -> None:
        """source: where the views come from (tui/view_sources.py); make_app() picks it."""
        super().__init__()
        self.source = source
        self._record_problem_shown = False
        self.save_dir = Path(save_dir) if save_dir is not None else snapshots_dir()
        self._clock = clock
        self.view: MonitorView | None = None  # the latest view received
        self._newest_view: MonitorView | None = None  # the latest view the sampling thread made
        self.paused = False
        self._frames_while_paused = 0
        self._stop_sampling = threading.Event()
        self._sampling_done = threading.Event()
        self._sampling_error: str | None = None
        self._last_saved: str | None = None
        self._job_note_lines = 0  # the job note's lines when last laid out
        self._drawn_view: MonitorView | None = None  # the view the panes show (older than self.view when paused)
        # The distributed job's rank the panes are scoped to, by RankRow.key: its PID, and its node in a job merged
        # across nodes (two nodes may each have a rank with the same PID).
        self.rank_choice = RankChoice()
        self._ranks_shown = False

    @property
    def monitor(self) -> MonitorProtocol:
        """The source's monitor: what `s` snapshots."""
        return self.source.monitor

    @property
    def selected_rank_key(self) -> str | None:
        """The distributed job's rank the panes are scoped to (RankChoice.key); None for all ranks."""
        return self.rank_choice.key

    @property
    def selected_rank_pid(self) -> int | None:
        """The selected rank's PID (its node's own, in a job merged across nodes)."""
        return pid_of_key(self.selected_rank_key) if self.selected_rank_key is not None else None

    # --- time -----------------------------------------------------------------------------------

    def now(self) -> float:
        if self._clock is not None:
            return self._clock()
        if self.view is not None and self.view.replay:
            return self.view.latest.time
        return time.time()

    # --- layout ---------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield JobNote(id="job-note")
        yield VerdictPane()
        with Container(id="body"):
            yield GpuPane()
            with Container(id="lower"):
                with Vertical(id="left"):
                    yield RanksPane()
                    yield CpuPane()
                yield StacksPane(native_available=self.source.native)
        yield Footer()

    def on_mount(self) -> None:
        end_on_sigint(self)
        self._apply_size(*self.size)
        self.query_one(StacksPane).focus_view()
        source = self.source
        if source.live:
            waiting = source.waiting
            if waiting is not None:
                self.query_one(VerdictPane).show_waiting(waiting.verdict)
                if waiting.panes is not None:
                    for pane in (self.query_one(GpuPane), self.query_one(CpuPane), self.query_one(StacksPane)):
                        pane.show_waiting(waiting.panes)
                if waiting.status:
                    self._render_status()
            self._follow_source()
        else:
            self._sampling_done.set()
            self.view = source.replay()
            self._render_all()
        if source.notice is not None:
            self.notify(source.notice.text, severity=source.notice.severity, timeout=source.notice.timeout_s)

    def on_resize(self, event) -> None:
        self._apply_size(*event.size)

    def _apply_size(self, width: int, height: int) -> None:
        # Textual CSS has no media queries: classes on the screen switch the layout (app.tcss).
        self.screen.set_class(width >= WIDE_LAYOUT_MIN_COLUMNS, "-wide")
        self.screen.set_class(height < SHORT_LAYOUT_MAX_ROWS, "-short")

    # --- sampling (off the UI thread) -----------------------------------------------------------

    @work(thread=True, exclusive=True, group="sampling", exit_on_error=False)
    def _follow_source(self) -> None:
        worker = get_current_worker()
        error = None
        try:
            error = self.source.run(self._deliver, self._stop_sampling, lambda: worker.is_cancelled)
        finally:
            self._sampling_done.set()
            self.post_message(SamplingStopped(error))

    def _deliver(self, view: MonitorView, asks: Sequence[tuple[str, bool]]) -> None:
        """On the source's thread: hand one view to the UI thread."""
        self._newest_view = view  # one reference, assigned atomically: the UI thread reads it
        if asks:  # its own message: frames may merge
            self.post_message(FlightRecorderAsked(list(asks)))
        self.post_message(FrameArrived(view))

    async def on_unmount(self) -> None:
        self._stop_sampling.set()
        # Wait for the sampling thread, so the caller may close the engine safely once run() returns.
        await asyncio.to_thread(self._sampling_done.wait, SAMPLER_STOP_TIMEOUT_S)

    # --- messages -------------------------------------------------------------------------------

    @on(FrameArrived)
    def _on_frame(self, message: FrameArrived) -> None:
        if not self.is_running:  # a frame that arrives while the app shuts down has no panes left to fill
            return
        self.view = message.view
        self._show_record_problem()
        if message.view is not self._newest_view and not self.paused:
            return  # a newer frame is already queued: when drawing falls behind, frames merge, not pile up
        if self.paused:
            self._frames_while_paused += 1
            self._render_status()
            return
        self._render_all()

    @on(FlightRecorderAsked)
    def _on_flight_recorder_asked(self, message: FlightRecorderAsked) -> None:
        for line, problem in message.lines:
            self.notify(line, severity="warning" if problem else "information", timeout=15)

    @on(SamplingStopped)
    def _on_sampling_stopped(self, message: SamplingStopped) -> None:
        if not self.is_running:
            return
        self._show_record_problem()
        if message.error:
            self._sampling_error = message.error
            self.notify(message.error, severity="error", timeout=15)
        self._render_status()
        # No more frames will come to move the clock: keep "exited N s ago" and "for N s" current.
        self.set_interval(CLOCK_TEXT_REFRESH_S, self._refresh_clock_texts)

    def _show_record_problem(self) -> None:
        """Once, as soon as recording stops: a notification with the whole message (the status bar keeps
        a short warning)."""
        if self.monitor.record_problem and not self._record_problem_shown:
            self._record_problem_shown = True
            self.notify(self.monitor.record_problem, severity="error", timeout=15)
            self._render_status()

    def _refresh_clock_texts(self) -> None:
        self._render_status()
        if self.view is not None and not self.paused:
            self.query_one(VerdictPane).show(self.view, self.now(), self._selected_rank_row(self.view))

    @on(RanksPane.RankChosen)
    def _on_rank_chosen(self, message: RanksPane.RankChosen) -> None:
        self._select_rank(message.key)

    @on(CpuPane.ProcessChosen)
    def _on_process_chosen(self, message: CpuPane.ProcessChosen) -> None:
        stacks = self.query_one(StacksPane)
        stacks.scope_to_process(message.pid)
        stacks.focus_view()

    # --- rendering ------------------------------------------------------------------------------

    def _render_all(self) -> None:
        self._render_status()
        if self.view is None:
            return
        self._draw(self.view)

    def _draw(self, view: MonitorView) -> None:
        self._drawn_view = view
        now = self.now()
        rows = rank_rows(view)
        self._follow_rank_selection(view, rows)
        selected = next((row for row in rows if row.key == self.selected_rank_key), None)
        # Across nodes the GPU, CPU and Stacks panes show the selected rank's node (the lead node's otherwise).
        shown = view.shown_frames_on(selected.node if selected is not None else None)
        group = rank_group(shown, selected.pid) if selected is not None else None
        scope_words = rank_scope_words(selected, group) if selected is not None and group is not None else None
        job_info = view.shown.job
        groups: tuple[RankGroup, ...] = ()
        if view.nodes and len(rows) > SUMMARY_MIN_RANKS:  # many ranks across nodes: those that agree as one row
            groups = agreeing_ranks(view.job, keep=[(selected.node, selected.pid)] if selected is not None else ())
        self.query_one(RanksPane).show(rows, view.job, self.selected_rank_key, job_info.kind if job_info else None,
                                       view.absent_across_nodes if view.nodes else
                                       absent_ranks(job_info, view.shown_frames, view.seen_running), groups)
        self.query_one(VerdictPane).show(view, now, selected)
        self.query_one(GpuPane).show(shown)
        self.query_one(CpuPane).show(shown[-1], group, selected.pid if selected else None, scope_words)
        stacks = self.query_one(StacksPane)
        stacks.set_group(group, scope_words)
        stacks.show(shown)

    def _follow_rank_selection(self, view: MonitorView, rows: list[RankRow]) -> None:
        """The selected rank follows the view (RankChoice.follow); showing or hiding the rank table switches the
        keys that work on it."""
        self.rank_choice.follow(view, rows)
        if bool(rows) != self._ranks_shown:
            self._ranks_shown = bool(rows)
            self.screen.set_class(self._ranks_shown, "-job")
            self.refresh_bindings()

    def _selected_rank_row(self, view: MonitorView) -> RankRow | None:
        return next((row for row in rank_rows(view) if row.key == self.selected_rank_key), None)

    def _select_rank(self, key: str | None) -> None:
        self.rank_choice.key = key
        if self._drawn_view is not None:  # paused: the frozen view, scoped to the new rank
            self._draw(self._drawn_view)

    def _render_status(self) -> None:
        self.query_one(StatusBar).update(self.status_text(), layout=False)  # always one line
        note = self.job_note_text()
        job_note = self.query_one(JobNote)
        if note is not None:
            # Laid out again only when its number of lines changes (a second node's line arrives): without it the
            # note kept the one line it first had, and a merged job's header showed n1 and never n2.
            lines = note.plain.count("\n") + 1
            job_note.update(note, layout=lines != self._job_note_lines)
            self._job_note_lines = lines
        if job_note.display != (note is not None):
            job_note.display = note is not None

    def job_note_text(self) -> Text | None:
        return header.job_note_text(self.view)

    def cannot_see_text(self) -> Text | None:
        return header.cannot_see_text(self.view)

    def status_text(self) -> Text:
        return header.status_text(self.view, pid=self.source.pid, interval_s=self.source.interval_s, now=self.now(),
                                  paused=self.paused, frames_while_paused=self._frames_while_paused,
                                  error=self._sampling_error, recording_stopped=self._record_problem_shown,
                                  last_saved=self._last_saved)

    # --- actions --------------------------------------------------------------------------------

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
            return
        self.push_screen(HelpScreen(self.help_bindings()))

    def help_bindings(self) -> list[tuple[str, list[Binding]]]:
        """Every documented key, grouped by where it works: generated from the bindings themselves."""
        everywhere = [b for b in self.BINDINGS if isinstance(b, Binding) and b.tooltip]
        focus_moves = [b for b in Screen.BINDINGS if isinstance(b, Binding) and "focus" in b.action]
        stacks = StacksPane.HELP_BINDINGS + [b for b in HotTable.BINDINGS if isinstance(b, Binding) and b.tooltip]
        groups = [("Everywhere", [b for b in everywhere if b not in self.JOB_BINDINGS] + focus_moves),
                  ("Stacks pane", stacks)]
        if self._ranks_shown:
            groups.insert(0, ("Distributed job", [b for b in self.JOB_BINDINGS if b.tooltip]))
        return groups

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The rank keys only while there are ranks to choose from (hidden from the footer otherwise)."""
        if action in ("next_rank", "previous_rank") or (action == "focus_pane" and parameters == ("ranks",)):
            return self._ranks_shown
        return True

    def action_next_rank(self) -> None:
        self._step_rank(1)

    def action_previous_rank(self) -> None:
        self._step_rank(-1)

    def _step_rank(self, step: int) -> None:
        if self._drawn_view is not None:
            self._select_rank(self.rank_choice.stepped(rank_rows(self._drawn_view), step))

    def action_pause(self) -> None:
        if self.view is not None and self.view.replay:
            self.notify("a replay is already still: nothing to pause", timeout=3)
            return
        self.paused = not self.paused
        was_behind = self._frames_while_paused
        self._frames_while_paused = 0
        if not self.paused and was_behind:
            self._render_all()
        else:
            self._render_status()

    def action_interrupt(self) -> None:
        """Ctrl-C: quit, with the exit status shells give an interrupted command (exit_status)."""
        self.exit(return_code=EXIT_INTERRUPTED)

    def action_save(self) -> None:
        if self.view is None:
            self.notify("nothing to save yet: no reading has arrived", severity="warning")
            return
        try:
            saved = save_snapshot(self.view.frames, self.monitor.snapshot(), self.export_screenshot(), self.save_dir)
        except OSError as exc:
            self.notify(f"could not save in {self.save_dir}: {exc.strerror or exc}", severity="error")
            return
        self._last_saved = f"{saved.json_path.name} (+ .svg)"
        self.notify(f"saved {saved.json_path} and {saved.svg_path.name} beside it", timeout=8)
        self._render_status()

    def action_focus_pane(self, pane_id: str) -> None:
        pane = self.query_one(f"#{pane_id}")
        if isinstance(pane, GpuPane) and not pane.can_focus:
            self.notify("no GPU to show: see the GPU line for why", timeout=4)
            return
        if isinstance(pane, StacksPane):
            pane.focus_view()
        elif isinstance(pane, RanksPane):
            pane.query_one("#ranks-table").focus()
        elif isinstance(pane, CpuPane):
            pane.query_one("#processes").focus()
        else:
            pane.focus()

    def action_filter(self) -> None:
        self.query_one(StacksPane).open_filter()

    def action_toggle_idle(self) -> None:
        self.query_one(StacksPane).toggle_idle()

    def action_cycle_window(self) -> None:
        self.query_one(StacksPane).cycle_window()

    def action_toggle_lines(self) -> None:
        self.query_one(StacksPane).toggle_lines()

    def action_toggle_now(self) -> None:
        self.query_one(StacksPane).toggle_now()

    def action_flight_recorder_dump(self) -> None:
        why_not = self.source.ask_flight_recorder_dump(running=not self._sampling_done.is_set())
        if why_not is not None:
            self.notify(f"no Flight Recorder dump asked: {why_not}", severity="warning", timeout=6)
            return
        self.notify("asking the ranks for a Flight Recorder dump at the next reading…", timeout=4)

    def action_native(self) -> None:
        if self.view is not None and self.view.replay:
            native = self.view.latest.stacks.native
            self.notify(f"this recording was made {'with' if native else 'without'} native frames", timeout=5)
        elif self.source.native:
            self.notify("native frames are on (started with --native)", timeout=5)
        else:
            pid = self.source.pid if self.source.pid is not None else "PID"
            self.notify(f"native frames need a restart: gputop --pid {pid} --native "
                        "(py-spy then pauses the target for each sample)", timeout=8)


def end_on_sigint(app: GputopApp) -> None:
    """From the app's mount on, SIGINT (kill -INT; Ctrl-C itself arrives as the ctrl+c key in the terminal's raw
    mode) ends it as that key does, exit status 130: asyncio's own handler would cancel the app, which ends 0."""
    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, app.action_interrupt)
    except (NotImplementedError, RuntimeError, ValueError):  # not in the main thread: SIGINT is not ours
        pass


def exit_status(app: GputopApp) -> int:
    """The command's exit status once `app.run()` has returned: 130 where Ctrl-C or SIGINT ended it, else 0."""
    return EXIT_INTERRUPTED if app.return_code == EXIT_INTERRUPTED else EXIT_OK


def make_app(*, engine: Engine | None = None, replay_frames: Sequence[Frame] | None = None,
             record_path: str | Path | None = None, hang_after_s: float = 5.0,
             clock: Callable[[], float] | None = None, save_dir: str | Path | None = None,
             recorder: Recorder | None = None, replay_notice: str | None = None,
             comparison: ComparisonInputs | None = None, startup_checks: tuple[Check, ...] = (),
             start_notice: str | None = None,
             cluster: tuple[AgentStreams, ClusterMonitor] | None = None) -> GputopApp:
    """The app, live (engine=...), replaying (replay_frames=...) or merging a job's nodes live (cluster=(the
    agents' streams, the ClusterMonitor)): exactly one of them. `clock` freezes "since" texts for
    tests; `save_dir` is where `s` writes (default: gputop's folder, snapshots_dir()). Live frames go to `recorder`,
    or to a recording opened at `record_path`. `replay_notice` says what a replay left out; `comparison`
    (--baseline, --model, --tokens-per-iter) is what the job's pace is measured against; `startup_checks` what
    `gputop doctor`'s checks found not ok on attach (probes.doctor.startup_blind_spots); `start_notice`, shown on
    start, says which job `gputop` chose when no PID was given."""
    if sum(x is not None for x in (engine, replay_frames, cluster)) != 1:
        raise ValueError("give exactly one of engine (live), replay_frames (replay) or cluster (live, merged)")
    if record_path is not None and recorder is None:
        recorder = Recorder(record_path, meta=recording_meta(engine.pid if engine else None, hang_after_s,
                                                             comparison))
    source: ViewSource
    if engine is not None:
        source = LiveSource(engine, Monitor(hang_after_s=hang_after_s, comparison=comparison, recorder=recorder,
                                            startup_checks=startup_checks), start_notice)
    elif cluster is not None:
        source = ClusterSource(*cluster)
    else:
        frames = tuple(replay_frames or ())
        monitor: MonitorProtocol
        if any(f.node is not None for f in frames):  # a recording of a job merged across nodes
            monitor = ClusterMonitor(hang_after_s=hang_after_s, comparison=comparison, replay=True)
        else:
            monitor = Monitor(hang_after_s=hang_after_s, comparison=comparison, recorder=recorder, replay=True,
                              startup_checks=startup_checks)
        source = ReplaySource(frames, monitor, replay_notice)
    return GputopApp(source=source, clock=clock, save_dir=save_dir)
