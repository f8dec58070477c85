"""Where the app's views come from: one ViewSource per way of running it, so the app itself never asks which.

- LiveSource: a process watched here. A thread loops `engine.tick()` through
  `probes.monitoring.engine.run_ticks` and folds each frame into a `probes.monitoring.monitor.Monitor`
  (history, verdict, timeline, recording, the job's pace).
- ClusterSource: a job merged across nodes. A thread reads the agents' streams and merges them once an interval
  (`probes.monitoring.cluster.run_merge` into a `ClusterMonitor`).
- ReplaySource: a recording, folded all at once at start-up through the same monitors (a `ClusterMonitor` when
  its frames carry their node), so the screen shows the end state at once and is deterministic.

Every source hands out the same immutable `MonitorView`s and offers its monitor through
`probes.view.MonitorProtocol`; `tui/app.py`'s `make_app()` picks the source.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from probes.frame import Frame
from probes.monitoring import AgentStreams, ClusterMonitor, Engine, Monitor, run_merge, run_ticks
from probes.view import MonitorProtocol, MonitorView

# What a source hands the app: a view, and what a Flight Recorder dump request did, rank by rank, at that frame
# (each line with whether it is a problem).
Deliver = Callable[[MonitorView, Sequence[tuple[str, bool]]], None]


@dataclass(frozen=True)
class Waiting:
    """What the screen says until the first view comes."""

    verdict: str  # the Verdict pane's line
    panes: str | None = None  # the GPU, CPU and Stacks panes' line; None leaves them blank
    status: bool = False  # whether the status line says "attaching" meanwhile


@dataclass(frozen=True)
class Notice:
    """A notification shown once on start."""

    text: str
    severity: Literal["information", "warning", "error"]
    timeout_s: float


class ViewSource(Protocol):
    """What the app needs of where its views come from."""

    monitor: MonitorProtocol  # what `s` snapshots; its record_problem is told once
    live: bool  # views come one by one from run(), on a thread; else replay() gives the one view at once
    pid: int | None  # the PID watched, for the status line before the first view and the --native advice
    interval_s: float | None  # said on the status line ("live every 1 s"); None: not said
    native: bool  # the stacks carry native frames (started with --native)
    waiting: Waiting | None  # what the screen says until the first view (a live source)
    notice: Notice | None  # shown once on start

    def replay(self) -> MonitorView | None:
        """Fold every frame now and return the last view (a replay)."""
        ...

    def run(self, deliver: Deliver, stop: threading.Event, cancelled: Callable[[], bool]) -> str | None:
        """Deliver views until `stop`, `cancelled()`, the target's end or an error, off the UI thread; why it
        stopped when that was an error (a probe's or a merge's: the screen keeps its data and says so)."""
        ...

    def ask_flight_recorder_dump(self, running: bool) -> str | None:
        """Ask the ranks for a Flight Recorder dump at the next reading; why none was asked, or None. `running`:
        whether run() still goes."""
        ...


class LiveSource:
    """A process watched on this machine: its engine's frames, each folded into one Monitor."""

    live: bool = True

    def __init__(self, engine: Engine, monitor: Monitor, start_notice: str | None = None) -> None:
        """start_notice: how the job was chosen when no PID was given."""
        self.engine = engine
        self.monitor: MonitorProtocol = monitor
        self.pid: int | None = engine.pid
        self.interval_s: float | None = engine.config.interval_s
        self.native: bool = engine.config.native
        self.waiting: Waiting | None = Waiting(
            verdict=f"Attaching to PID {engine.pid}: the first reading comes within a second.",
            panes="waiting for the first reading…", status=True)
        self.notice: Notice | None = Notice(start_notice, "information", 20) if start_notice else None

    def replay(self) -> MonitorView | None:
        return None

    def run(self, deliver: Deliver, stop: threading.Event, cancelled: Callable[[], bool]) -> str | None:
        try:
            # The first tick at once, not after one interval, so the screen has data within a second.
            frame = self.engine.tick()
            self._deliver(frame, deliver)
            if frame.target.alive:
                for frame in run_ticks(self.engine, stop):
                    if cancelled():
                        break
                    self._deliver(frame, deliver)
                    if not frame.target.alive:  # nothing more to read: keep its last readings on screen
                        break
        except Exception as exc:  # a probe bug must not kill the screen: say so, keep the data on it
            return f"sampling stopped: {type(exc).__name__}: {exc}"
        finally:
            self.monitor.close()
        return None

    def _deliver(self, frame: Frame, deliver: Deliver) -> None:
        view = self.monitor.ingest(frame)
        if view is None:  # a Monitor makes a view of every frame
            return
        asks = frame.collectives.asks if frame.collectives is not None else ()
        deliver(view, [(ask.line, ask.action in ("not_asked", "no_dump")) for ask in asks])

    def ask_flight_recorder_dump(self, running: bool) -> str | None:
        if not running:
            return "sampling has stopped"
        self.engine.request_flight_recorder_dump()
        return None


class ClusterSource:
    """A job merged across nodes, live: the agents' streams merged once an interval into a ClusterMonitor. The
    caller (tui/across_nodes.py) closes the streams and the monitor once the app has ended."""

    live: bool = True
    pid: int | None = None
    interval_s: float | None = None
    native: bool = False
    notice: Notice | None = None

    def __init__(self, streams: AgentStreams, monitor: ClusterMonitor) -> None:
        self.streams = streams
        self.cluster_monitor = monitor
        self.monitor: MonitorProtocol = monitor
        self.waiting: Waiting | None = Waiting(
            verdict="Starting an agent on every node of the job: the first frames come within seconds.")

    def replay(self) -> MonitorView | None:
        return None

    def run(self, deliver: Deliver, stop: threading.Event, cancelled: Callable[[], bool]) -> str | None:
        def each_view(view: MonitorView) -> None:
            deliver(view, ())

        try:
            run_merge(self.streams, self.cluster_monitor, stop, interval_s=self.cluster_monitor.interval_s,
                      on_view=each_view)
        except Exception as exc:  # a merge bug must not kill the screen: say so, keep the data on it
            return f"merging stopped: {type(exc).__name__}: {exc}"
        return None

    def ask_flight_recorder_dump(self, running: bool) -> str | None:
        return "merged across nodes, ask on the node where the ranks run: gputop --pid PID --fr-dump"


class ReplaySource:
    """A recording, folded at start-up: the app shows its end state (the verdict timeline tells how the run
    changed)."""

    live: bool = False
    pid: int | None = None
    interval_s: float | None = None
    native: bool = False
    waiting: Waiting | None = None

    def __init__(self, frames: Sequence[Frame], monitor: MonitorProtocol, notice: str | None = None) -> None:
        """notice: what the replay left out of a damaged recording."""
        self.frames = tuple(frames)
        self.monitor = monitor
        self.notice: Notice | None = Notice(notice, "warning", 15) if notice else None

    def replay(self) -> MonitorView | None:
        view = None
        for frame in self.frames:
            view = self.monitor.ingest(frame)
        if self.frames:  # merged across nodes, the last round (whichever node sent last) makes the view
            view = self.monitor.settle(self.frames[-1].time) or view
        return view

    def run(self, deliver: Deliver, stop: threading.Event, cancelled: Callable[[], bool]) -> str | None:
        return None  # every view was made by replay()

    def ask_flight_recorder_dump(self, running: bool) -> str | None:
        return "a replay asks nothing of a job"
