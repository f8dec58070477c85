"""The look-back windows the diagnosis reads its facts over, and the two helpers every part of it shares: the
recent frames of a window (bounded whatever the History's length), and the mean of the readings present.

Further look-backs belong to the fact that uses them: the compile look-backs to compile_history.py, the GIL's to
gil.py, the still-stack's to evidence.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from probes.frame import Frame
from probes.recent import recent_frames

STACK_WINDOW_S = 10.0  # stack counts arrive in windows of up to 5 s: look at two of them
METRIC_WINDOW_S = 5.0  # CPU, cgroup and GPU counters: recent enough to follow a phase change
MAX_LOOKBACK_FRAMES = 300  # bounds every walk over the history, whatever its length


def recent(history: Sequence[Frame], seconds: float) -> list[Frame]:
    """Frames within `seconds` of the latest, oldest first, at most MAX_LOOKBACK_FRAMES of them."""
    return recent_frames(history, seconds, MAX_LOOKBACK_FRAMES)


def mean(values: Iterable[float | None]) -> float | None:
    """The mean of the values that are there (None where none is)."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None
