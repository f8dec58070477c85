"""What the front ends read: the immutable MonitorView a monitor hands out for each frame, what it holds (the
verdict's changes, the job's pace, each node of a job merged across nodes), and MonitorProtocol, what every
monitor offers the front ends.

Below both the monitors (monitor.py, cluster.py) that make views and the outputs (probes/outputs/snapshot.py,
the exporter, tui/) that read them, so that no reader of a view imports the code that folds frames.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from probes.diagnosis.absent_ranks import SeenRunning
from probes.diagnosis.shares import TimeShares
from probes.doctor import Check
from probes.frame import Bottleneck, Frame, JobVerdict, Liveness, Verdict
from probes.reference.job_pace import Pace


@dataclass(frozen=True)
class VerdictChange:
    """The verdict's (bottleneck, liveness) pair changed at `time` (Unix time)."""

    time: float
    bottleneck: Bottleneck
    liveness: Liveness


# no_task: the node's agent answers, and says (from Slurm) that no task of the job runs there now: its tasks there
# ended, or none was placed there. Never "lost": that is for a node whose agent stopped answering while its tasks ran.
NodeState = Literal["waiting", "live", "lost", "no_task"]


@dataclass(frozen=True)
class NodeStatus:
    """One node of a job merged across nodes (probes/monitoring/cluster.py) as the merge sees it, for the per-node
    header line and the snapshot's `nodes`."""

    name: str
    state: NodeState
    ranks: int = 0
    last_frame_time: float | None = None  # Unix time of its latest frame
    lost_at: float | None = None  # Unix time it was found lost
    reason: str | None = None  # why it is lost (its stream ended, it went silent, what its agent said)
    gpu_clock_mhz: float | None = None  # mean SM clock of the job's GPUs there
    busy_cpu_share: float | None = None  # how busy its CPUs the job may run on are, by anyone (0..1)
    bottleneck: Bottleneck | None = None  # that node's own verdict, for the header line
    note: str | None = None  # no_task: what its agent said ("no task of job 12 here: ..."; probes/sensors/slurm.py)

    def line(self) -> str:
        """'n1: 2 ranks · GPUs 1980 MHz · CPUs 45% busy · idle', 'n2: lost at 13:02:11 (its stream ended)', or
        'n2: no task of job 12 here: ...'."""
        if self.state == "no_task":
            return f"{self.name}: {self.note or 'no task of the job here'}"
        if self.state == "lost":
            at = time.strftime("%H:%M:%S", time.localtime(self.lost_at)) if self.lost_at is not None else "?"
            return f"{self.name}: lost at {at}" + (f" ({self.reason})" if self.reason else "")
        if self.state == "waiting":
            return f"{self.name}: waiting for its agent's first frame"
        parts = [f"{self.name}: {self.ranks} rank{'s' if self.ranks != 1 else ''}"]
        if self.gpu_clock_mhz is not None:
            parts.append(f"GPUs {self.gpu_clock_mhz:.0f} MHz")
        if self.busy_cpu_share is not None:
            parts.append(f"CPUs {100 * self.busy_cpu_share:.0f}% busy")
        if self.bottleneck:
            parts.append(self.bottleneck)
        return " · ".join(parts)


@dataclass(frozen=True)
class MonitorView:
    """What the front ends render: one immutable picture per frame."""

    frames: tuple[Frame, ...]  # the bounded history, oldest first
    verdict: Verdict = field(default_factory=Verdict)
    timeline: tuple[VerdictChange, ...] = ()  # oldest first
    first_time: float | None = None  # time of the first frame ever seen (history may have dropped it)
    replay: bool = False
    pace: Pace | None = None
    # A distributed job's verdict, each rank's beside it; None for a lone process. When set, `verdict` is
    # the job's (job.verdict, with the pace line) and the timeline follows it.
    job: JobVerdict | None = None
    shares: TimeShares | None = None  # the main thread's time per phase over the last minutes
    # What gputop cannot see now (probes/doctor.py: the frame's own blind spots and the checks made on attach),
    # worst first: said in the header, on stderr when headless, and in the snapshot; never taken for a verdict.
    cannot_see: tuple[Check, ...] = ()
    # A job merged across nodes: each node's status, lost ones included; () on a one-node run.
    nodes: tuple[NodeStatus, ...] = ()
    # A job merged across nodes: each answering node's own frames by node name ({} on a one-node run). `frames`
    # are the lead node's; a front end that shows another node's rank shows that node's frames (PIDs are each
    # node's own, so one node's PID means nothing in another's frames).
    node_frames: dict[str, tuple[Frame, ...]] = field(default_factory=dict)
    # When each rank was last seen running (probes/diagnosis/absent_ranks.py), kept past the history's window: the
    # Ranks pane words a rank that exited with it. A job merged across nodes: the lead node's.
    seen_running: SeenRunning = field(default_factory=SeenRunning)
    # A job merged across nodes: (rank, words) for each rank of the world no node shows running ("exited at
    # 12:00:04 on n2"), for the Ranks pane (cluster.absent_across_nodes); () on a one-node run.
    absent_across_nodes: tuple[tuple[str, str, str | None], ...] = ()

    @property
    def latest(self) -> Frame:
        return self.frames[-1]

    @property
    def shown_frames(self) -> tuple[Frame, ...]:
        """Frames up to the last one taken while the target lived: after it exits, the panes keep
        showing what it was doing rather than an empty tree."""
        return _up_to_last_alive(self.frames)

    def shown_frames_on(self, node: str | None) -> tuple[Frame, ...]:
        """shown_frames of one node of a job merged across nodes; the lead node's for None or a node that
        sends no frames now (lost)."""
        frames = self.node_frames.get(node) if node is not None else None
        return _up_to_last_alive(frames) if frames else self.shown_frames

    @property
    def shown(self) -> Frame:
        return self.shown_frames[-1]


def _up_to_last_alive(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    for index in range(len(frames) - 1, -1, -1):
        if frames[index].target.alive:
            return frames[: index + 1]
    return frames


class MonitorProtocol(Protocol):
    """What a front end asks of a monitor, whether it folds one node's frames (monitor.Monitor) or several
    nodes' (cluster.ClusterMonitor): the app, `gputop replay --snapshot` and the headless runs use only this."""

    record_problem: str | None  # why the recording stopped (a full disk), set once; monitoring goes on

    @property
    def view(self) -> MonitorView | None:
        """The latest view; None before the first."""
        ...

    def ingest(self, frame: Frame) -> MonitorView | None:
        """Fold one frame; the view it gives (None while a merge across nodes waits for the other nodes)."""
        ...

    def settle(self, now: float) -> MonitorView | None:
        """Fold what still waits at `now` (the last frame's time, at a recording's end) and return the view that
        made: a merge across nodes makes its last round, whichever node sent last. None where nothing waits (one
        node's monitor folds each frame as it comes)."""
        ...

    def snapshot(self, partial: str | None = None) -> dict[str, Any]:
        """The snapshot document (gputop.snapshot/2) of everything folded so far; needs one view."""
        ...

    def close(self) -> None:
        """Close the recording, if any."""
        ...
