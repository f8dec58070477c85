"""History: the last N frames, bounded so memory stays flat however long gputop runs."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from probes.frame import Frame
from probes.recent import recent_frames

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
