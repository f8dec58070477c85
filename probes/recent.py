"""The one definition of "the last N seconds" over a run's frames, which the diagnosis, the monitor's history, the
panes and the snapshot share. Below every floor that reads frames (it knows only probes/frame.py), so none of them
imports it from above its own."""

from __future__ import annotations

from collections.abc import Sequence

from probes.frame import Frame


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
