"""Whether memory grows, how fast, and when it reaches its limit at that rate, from a series of readings: one
process's RSS, a DataLoader's workers summed, the cgroup's usage, a GPU's memory used. And whether a forked
worker's pages are turning private (copy-on-read). Pure: it reads nothing; the readings come from
probes/sensors/cgroup.py, probes/sensors/proc_readers.py (smaps_rollup) and probes/sensors/nvml.py.

The rate is the least-squares slope over the last WINDOW_S seconds, claimed only when all of these hold:
- the window holds MIN_POINTS points over MIN_SPAN_S seconds: fewer cannot tell a trend from one step's sawtooth;
- the slope is more than SIGMAS standard errors from zero. Memory readings are not independent noise (a
  training step allocates and frees in a cycle, so neighbouring residuals are correlated), which makes the
  textbook standard error too small; 3 of them rather than 2 leaves room for that;
- each half of the window changes in the same direction at least HALF_SHARE of the whole window's rate. A step
  (a model or a dataset loaded, an evaluation's buffers, the caching allocator taking one more segment) rises in
  one half and is flat in the other: a fit across it has a large, "significant" slope that does not continue, and
  a time to the limit drawn from it would be an alarm about nothing;
- the fitted change over the window is at least MIN_CHANGE_BYTES: a slope that is significant but tiny is
  the allocator's and the page cache's drift, and would reach no limit in any run's lifetime.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

# 90 s: long enough to hold many steps of a training loop (0.1 to 10 s each) and average out their sawtooth;
# short enough that the rate is today's, not the run's average: the minute or two of loading a model and a dataset,
# which rise and then stop, leave the window soon after training starts, and a leak that begins mid-run is claimed
# about a window later.
WINDOW_S = 90.0
# At one reading a tick (about 1 s) the window holds ~90 points; 10 over 30 s is the least that says a trend.
MIN_POINTS = 10
MIN_SPAN_S = 30.0
SIGMAS = 3.0
HALF_SHARE = 1 / 3  # an accelerating leak's first half is slower than the whole; a step's is about zero
MIN_CHANGE_BYTES = 4 << 20


@dataclass(frozen=True)
class Fit:
    """A least-squares line through (time, bytes) points."""

    slope: float  # bytes per second
    stderr: float  # the slope's standard error, bytes per second
    value_at_end: float  # the line's value at the last point's time


@dataclass(frozen=True)
class Growth:
    """How a memory series changes over its window."""

    points: int  # in the window
    span_s: float
    slope_bytes_per_s: float | None  # the fitted slope, claimed or not (None with under 3 points)
    stderr_bytes_per_s: float | None
    rate_bytes_per_s: float | None  # the slope, only where the rules above claim a steady change; else None
    latest_bytes: float | None  # the fit's value now: less noisy than the last reading
    seconds_to_limit: float | None  # growing with a limit: when the fit reaches it at this rate (0: at it already)
    reason: str | None  # why no rate is claimed

    @property
    def growing(self) -> bool:
        return self.rate_bytes_per_s is not None and self.rate_bytes_per_s > 0


def fit_line(points: Sequence[tuple[float, float]]) -> Fit | None:
    """The least-squares line through the points; None with under 3 points or all at one time."""
    n = len(points)
    if n < 3:
        return None
    # Centred on the means: Unix times squared lose a float's precision.
    mean_t = sum(t for t, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((t - mean_t) ** 2 for t, _ in points)
    if sxx <= 0:
        return None
    slope = sum((t - mean_t) * (y - mean_y) for t, y in points) / sxx
    intercept = mean_y - slope * mean_t
    residuals = sum((y - intercept - slope * t) ** 2 for t, y in points)
    stderr = math.sqrt(residuals / (n - 2) / sxx)
    return Fit(slope, stderr, intercept + slope * points[-1][0])


def memory_growth(
    points: Sequence[tuple[float, float]],
    limit_bytes: float | None = None,
    *,
    window_s: float = WINDOW_S,
    min_points: int = MIN_POINTS,
    min_span_s: float = MIN_SPAN_S,
    sigmas: float = SIGMAS,
    min_change_bytes: float = MIN_CHANGE_BYTES,
) -> Growth:
    """The growth of a (unix time, bytes) series over its last `window_s` seconds, oldest first, and the time left
    to `limit_bytes` at that rate."""
    ordered = sorted(points)
    window = [p for p in ordered if ordered and p[0] >= ordered[-1][0] - window_s]
    span = window[-1][0] - window[0][0] if window else 0.0
    fit = fit_line(window)

    def unclaimed(reason: str) -> Growth:
        return Growth(
            len(window), span, fit.slope if fit else None, fit.stderr if fit else None, None,
            fit.value_at_end if fit else None, None, reason,
        )

    if fit is None or len(window) < min_points or span < min_span_s:
        return unclaimed(f"{len(window)} points over {span:.0f} s; a rate needs {min_points} over {min_span_s:.0f} s")
    if abs(fit.slope) <= sigmas * fit.stderr:
        return unclaimed(f"no steady change: the slope is within {sigmas:g} standard errors of zero")
    if abs(fit.slope) * span < min_change_bytes:
        return unclaimed(f"changed {abs(fit.slope) * span / 2**20:.1f} MiB over the window: drift, not growth")
    middle = window[0][0] + span / 2
    for half in ([p for p in window if p[0] <= middle], [p for p in window if p[0] >= middle]):
        half_fit = fit_line(half)
        if half_fit is None or half_fit.slope * fit.slope < 0 or abs(half_fit.slope) < HALF_SHARE * abs(fit.slope):
            return unclaimed("the change lies in one half of the window: a step, not a steady growth")
    to_limit = None
    if limit_bytes is not None and fit.slope > 0:
        to_limit = max(0.0, (limit_bytes - fit.value_at_end) / fit.slope)
    return Growth(len(window), span, fit.slope, fit.stderr, fit.slope, fit.value_at_end, to_limit, None)


class PrivateShared(Protocol):
    """A process's memory split as smaps_rollup splits it (probes/sensors/proc_readers.py SmapsRollup), or several
    workers' summed."""

    @property
    def private_bytes(self) -> int: ...

    @property
    def shared_bytes(self) -> int: ...


@dataclass(frozen=True)
class CopyOnRead:
    """Whether a forked worker's pages are turning from shared (its parent's) to private (its own copies)."""

    turning_private: bool
    private: Growth
    shared: Growth
    reason: str | None  # why not, where not


def copy_on_read(samples: Sequence[tuple[float, PrivateShared]], window_s: float = WINDOW_S) -> CopyOnRead:
    """From one worker's smaps_rollup reads over time: its private bytes grow while its shared bytes shrink by a
    like amount. That is the parent's pages becoming the worker's own copies as it touches them: Python's
    reference counts written on every object of a dataset held as a list of Python objects (copy-on-read), each
    worker ending up with its own copy. A worker that merely allocates grows private bytes with shared ones steady."""
    private = memory_growth([(t, s.private_bytes) for t, s in samples], window_s=window_s)
    shared = memory_growth([(t, s.shared_bytes) for t, s in samples], window_s=window_s)
    if not private.growing or private.rate_bytes_per_s is None:
        return CopyOnRead(False, private, shared, f"private bytes not growing: {private.reason or 'falling'}")
    if shared.rate_bytes_per_s is None or shared.rate_bytes_per_s >= 0:
        return CopyOnRead(False, private, shared, f"shared bytes not falling: {shared.reason or 'rising'}")
    # Each page copied leaves the shared count as it joins the private one; half allows for the worker's own
    # allocations growing beside the copies.
    if -shared.rate_bytes_per_s < 0.5 * private.rate_bytes_per_s:
        return CopyOnRead(False, private, shared, "shared bytes fall far slower than private ones grow")
    return CopyOnRead(True, private, shared, None)
