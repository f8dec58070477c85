"""The stack sampler's policy: how fast to sample one process, in windows of what length, how often to dump.

Pure: no processes, no files, no clock. The stack sampler (probes/pyspy.py) asks a :class:`SamplingPolicy`
for the next record window's rate and length and the wait before the next dump, and tells it what each
finished window showed; tests drive it the same way, with no py-spy.

The policy, per process:

* Look closely first: ``rate_hz`` (5 Hz by default) in short windows, 1 s and doubling up to
  ``max_window_s``. ``py-spy record`` writes nothing until a window ends, so short windows make the first
  verdict come fast and longer ones spread py-spy's start-up cost (see probes/pyspy.py).
* Settle: once a full-length window shows the same dominant position (innermost busy function and file,
  known waits left out) as the window before it, sample at ``settled_rate_hz`` (1 Hz) in
  ``settled_window_s`` windows (10 s) and dump every ``settled_dump_every_s`` (15 s): py-spy's cost to the
  target grows with threads x rate, and a picture that holds still needs few samples.
* Go back: a settled window whose dominant position differs from the previous one restores the fast rate
  and short windows, so the change is looked at closely.

With ``settled_rate_hz`` None (a rate the user fixed) it never settles.
"""

from __future__ import annotations

from collections.abc import Hashable

DEFAULT_RATE_HZ = 5.0
# Once a process's picture has settled sampling drops to this rate. The overhead benchmark (README) chose
# these: py-spy's cost to the target grows with threads x rate.
SETTLED_RATE_HZ = 1.0
DEFAULT_DUMP_EVERY_S = 5.0
FIRST_WINDOW_S = 1.0
MAX_WINDOW_S = 5.0
SETTLED_WINDOW_S = 10.0
SETTLED_DUMP_EVERY_S = 15.0


class SamplingPolicy:
    """One process's sampling rate, window length and dump cadence; see the module docstring.

    Not thread-safe: the sampler calls it under its own lock.
    """

    def __init__(
        self,
        rate_hz: float = DEFAULT_RATE_HZ,
        settled_rate_hz: float | None = None,
        *,
        first_window_s: float = FIRST_WINDOW_S,
        max_window_s: float = MAX_WINDOW_S,
        settled_window_s: float = SETTLED_WINDOW_S,
        dump_every_s: float = DEFAULT_DUMP_EVERY_S,
        settled_dump_every_s: float = SETTLED_DUMP_EVERY_S,
    ) -> None:
        self.fast_rate_hz = float(rate_hz)
        self.settled_rate_hz = float(settled_rate_hz) if settled_rate_hz is not None else None
        self.first_window_s = first_window_s
        self.max_window_s = max(max_window_s, first_window_s)
        self.settled_window_s = settled_window_s
        self.dump_every_s = dump_every_s
        self.settled_dump_every_s = settled_dump_every_s
        self.rate_hz = self.fast_rate_hz  # of the next record window
        self.window_s = first_window_s  # length of the next record window
        self._previous_picture: Hashable | None = None

    @property
    def settled(self) -> bool:
        """Sampling at the settled rate (the picture has held still)."""
        return self.rate_hz != self.fast_rate_hz

    def window_finished(self, picture: Hashable | None) -> None:
        """A record window ended with samples; ``picture`` is its dominant position
        (probes.pyspy_output.dominant_position). Decides the next window's rate and length."""
        self.window_s = min(self.window_s * 2, self.max_window_s)
        if self.settled_rate_hz is None:
            return
        if self.window_s >= self.max_window_s and picture == self._previous_picture:
            self.rate_hz, self.window_s = self.settled_rate_hz, self.settled_window_s
        elif self.settled:  # the picture moved: look closely again
            self.rate_hz, self.window_s = self.fast_rate_hz, self.first_window_s
        self._previous_picture = picture

    def dump_wait_s(self) -> float:
        """Seconds to wait after a dump before the next one."""
        if self.settled:
            return max(self.dump_every_s, self.settled_dump_every_s)
        return self.dump_every_s
