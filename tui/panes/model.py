"""What the panes render: an immutable view of the monitor's state, handed from the sampling thread to the
UI thread in one message, so no pane ever reads a structure another thread is changing."""

from __future__ import annotations

from dataclasses import dataclass, field

from probes.frame import Frame, Verdict


@dataclass(frozen=True)
class VerdictChange:
    """The verdict's (bottleneck, liveness) pair changed at `time` (Unix time)."""

    time: float
    bottleneck: str
    liveness: str


@dataclass(frozen=True)
class MonitorView:
    frames: tuple[Frame, ...]  # the bounded history, oldest first
    verdict: Verdict = field(default_factory=Verdict)
    timeline: tuple[VerdictChange, ...] = ()  # oldest first
    first_time: float | None = None  # time of the first frame ever seen (history may have dropped it)
    replay: bool = False

    @property
    def latest(self) -> Frame:
        return self.frames[-1]

    @property
    def shown_frames(self) -> tuple[Frame, ...]:
        """Frames up to the last one taken while the target lived: after it exits, the panes keep
        showing what it was doing rather than an empty tree."""
        for index in range(len(self.frames) - 1, -1, -1):
            if self.frames[index].target.alive:
                return self.frames[: index + 1]
        return self.frames

    @property
    def shown(self) -> Frame:
        return self.shown_frames[-1]
