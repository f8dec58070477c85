"""History: the last N frames, bounded so memory stays flat however long gputop runs."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence

from probes.frame import Frame

DEFAULT_HISTORY_FRAMES = 600  # ten minutes at the default 1 s tick


class History:
    """A bounded ring of frames, oldest first. Appending past capacity drops the oldest frame."""

    def __init__(self, capacity: int = DEFAULT_HISTORY_FRAMES) -> None:
        if capacity < 1:
            raise ValueError("history capacity must be at least 1")
        self._frames: deque[Frame] = deque(maxlen=capacity)

    @property
    def capacity(self) -> int:
        return self._frames.maxlen or 0

    def append(self, frame: Frame) -> None:
        self._frames.append(frame)

    def __len__(self) -> int:
        return len(self._frames)

    def __iter__(self) -> Iterator[Frame]:
        return iter(self._frames)

    def __getitem__(self, index: int) -> Frame:
        return self._frames[index]

    @property
    def latest(self) -> Frame | None:
        return self._frames[-1] if self._frames else None

    def window(self, seconds: float) -> list[Frame]:
        """Frames whose time lies within `seconds` of the latest frame's (all of them for seconds <= 0)."""
        return recent_frames(self._frames, seconds if seconds > 0 else None)


def recent_frames(frames: Sequence[Frame], seconds: float | None, limit: int | None = None) -> list[Frame]:
    """The frames within `seconds` of the latest one's time, oldest first (a frame exactly `seconds` old is
    in); all of them for None. At most `limit` (the newest), so a walk costs the same on any history.

    The one definition of "the last N seconds" that the diagnosis, the panes and the snapshot share."""
    out: list[Frame] = []
    if not frames:
        return out
    recent = getattr(frames, "recent", None)
    if recent is not None:  # a view that finds the window without building every frame it looks at
        return recent(seconds, limit)  # (probes/diagnosis/rank_projection.py's RankHistory)
    cutoff = None if seconds is None else frames[-1].time - seconds
    for index in range(len(frames) - 1, -1, -1):
        frame = frames[index]
        if (cutoff is not None and frame.time < cutoff) or (limit is not None and len(out) >= limit):
            break
        out.append(frame)
    out.reverse()
    return out
