"""The one rule for a job's pace, whatever its log prints: the step counter's rate over the window.

The pace (seconds per step) is how fast the step number in the log moves: from the time the newest step line
appeared back to the step line of the start of the window (``PACE_WINDOW_S`` before it, or the oldest line seen
when gputop has watched for less), divided by the steps between them. It is there from the first two step lines
on. A line's own timestamp is its time where it prints one; else the time it arrived in the log (the log probe
reads it from the file's modification time, so a line is timed to the write, not to the tick that read it).

What the log prints per step (a time, a bar's smoothed rate, a time worked out from a throughput) is a cross-check:
it is the pace only while the counter has not moved yet (one step line seen), and after that it is set against the
counter over the window: the printed figures of the lines the counter spans, averaged, against the counter, with
at least ``MIN_INTERVALS`` counted intervals and printed figures behind each. So a loop whose printed times
alternate (batches arriving in pairs from two DataLoader workers) but average to the counter's rate claims nothing.
A figure that is a moving average of its own (the demo's last 10 s, Megatron's log interval) is also set against
the counter over trailing spans of the window: where one of them fits it, it describes the last stretch rightly,
and no claim starts.

That they disagree is a claim with two thresholds (hysteresis), judged at each new step line once no more lines can
join it: lines read together share one arrival time (the file's modification time, the newest write's), so only the
last step of a read is timed right, and a judgement at the first would set the read's time against an earlier step
(three 0.3 s lines read at once every 0.9 s read as 1.4× slower than printed). A sighting is judged when the next
one, later, arrives or when the figures are asked for after a read. It starts once the
ratio has been above ``DISAGREES`` at ``HOLD_LINES`` step lines in a row, and ends once it has been below
``AGREES`` at ``HOLD_LINES`` step lines in a row (or at once where the two agree within ``SAME_IN_WORDS``). A
ratio that hovers around one threshold (litgpt's printed estimate against its counter: 1.3× said in 10 of 105
reads of a real run, gone in the others) then gives one claim that holds, or none, never one that comes and goes;
and a claim always carries the ratio it measured, never "1.0×".

Pure: the log probe (``probes.sensors.progress``) notes each step line and printed figure here, and the monitor
words a disagreement with ``disagreement_words``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import islice

PACE_WINDOW_S = 60.0  # the last minute of step lines: long enough to average a log's jitter, short enough to follow
# More than 25% apart, measured over the window: the bound for saying what a printed time is, and well
# above what a tick's lag in reading a line costs over a window of several steps. A claim starts above it.
DISAGREES = 1.25
# A claim ends below this: the band between the two thresholds is wider than what a window's mean moves by from one
# step line to the next, so a ratio hovering at either threshold cannot switch the claim on and off.
AGREES = 1.15
# ... and either switch needs the ratio on its side at this many step lines in a row: one odd line (a step that also
# saved a checkpoint) weighs heavily in a window of few lines, and must not start or end a claim. Step lines, not
# reads: the claim follows what the log says, not how often gputop reads it.
HOLD_LINES = 3
SAME_IN_WORDS = 1.05  # below this the ratio reads "1.0×": nothing left to say, so the claim ends at once
MIN_INTERVALS = 2  # a disagreement rests on two counted intervals and two printed figures at least
# The trailing spans a printed figure is also set against (a moving average of its own span): the shortest holds this
# many steps (fewer, and batches arriving in pairs make a span's pace anything), the first is this many sightings
# back and each next one twice as far, to the window's start: a few spans whatever the window holds.
TRAILING_MIN_STEPS = 10
TRAILING_FIRST_SIGHTINGS = 4
STEP_COUNTER = "step counter"
BAR_RATE = "the bar's own rate"  # printed_from for a progress bar's rate (tqdm, Lightning): its own moving average
# Bounds the memory of a log that prints thousands of timestamped lines a minute; the window then spans fewer
# seconds but still thousands of lines, plenty for a rate.
_MAX_ENTRIES = 4096


@dataclass(frozen=True)
class PaceFigures:
    """The pace as the rule gives it, and the printed figure beside it where they disagree."""

    seconds_per_iter: float | None = None
    derived_from: str | None = None  # STEP_COUNTER, else what the printed figure was worked out from (None: printed)
    # The log's own figure averaged over the window's lines, set only where it disagrees with the counter
    printed_seconds_per_iter: float | None = None
    printed_from: str | None = None  # what that printed figure was worked out from; None: printed as such


@dataclass(frozen=True)
class _Printed:
    time: float
    seconds: float
    derived_from: str | None
    bar: bool


class StepPace:
    """The step lines and printed figures of one log, over the window, and the pace they give."""

    def __init__(self, window_s: float = PACE_WINDOW_S) -> None:
        self.window_s = window_s
        # (time, step) where a step was first seen, oldest first; the first entry is the window's start
        self._sightings: deque[tuple[float, int]] = deque(maxlen=_MAX_ENTRIES)
        self._printed: deque[_Printed] = deque(maxlen=_MAX_ENTRIES)
        self._latest_printed: _Printed | None = None
        self._claimed = False  # the printed figure is said to disagree with the counter
        self._held = 0  # step lines in a row at which the ratio stood past the threshold that would switch the claim
        self._unjudged = False  # the newest sighting has not been judged yet: lines of its read may still join it

    def restart(self) -> None:
        """What came before says nothing of the steps from now on (a new run, a bar starting again at 0)."""
        self._sightings.clear()
        self._printed.clear()
        self._claimed, self._held, self._unjudged = False, 0, False

    def note_step(self, step: int, when: float) -> None:
        """A line saying the job has reached `step` at `when` (a step seen again later is no new sighting: the
        counter times when a step was reached, not how long the log dwelt on it)."""
        if self._sightings and step < self._sightings[-1][1]:
            self.restart()  # a new run, or a bar starting again at 0
        if self._sightings:
            last_time, last_step = self._sightings[-1]
            if step == last_step:
                return
            if when <= last_time:  # read at once with the one before (a tick's batch of lines): the newest counts
                self._sightings[-1] = (last_time, step)
                return
        self._judge_newest()  # a later line: no more lines can join the sighting before it
        self._sightings.append((when, step))
        self._trim()
        self._unjudged = True

    def note_printed(self, seconds: float, derived_from: str | None, when: float, bar: bool = False) -> None:
        """A time per step the log printed (or that was worked out from what it printed) on a line at `when`;
        `bar`: a progress bar's rate, redrawn in place."""
        printed = _Printed(when, seconds, derived_from, bar)
        self._latest_printed = printed
        self._printed.append(printed)
        self._trim()

    def figures(self) -> PaceFigures:
        """The pace and any disagreement, asked for after a read (the read's last step line is judged first)."""
        self._judge_newest()
        latest = self._latest_printed
        if len(self._sightings) < 2:  # the counter has not moved yet: the printed figure stands alone
            return PaceFigures(latest.seconds, latest.derived_from) if latest is not None else PaceFigures()
        counted = self._counted()
        compared = self._printed_over_window()
        if not self._claimed or compared is None:
            return PaceFigures(counted, STEP_COUNTER)
        printed, newest = compared
        return PaceFigures(counted, STEP_COUNTER, printed, BAR_RATE if newest.bar else newest.derived_from)

    def _counted(self) -> float:
        (start, first_step), (end, last_step) = self._sightings[0], self._sightings[-1]
        return (end - start) / (last_step - first_step)

    def _printed_over_window(self) -> tuple[float, _Printed] | None:
        """The mean of the printed figures of the lines the counter spans and the newest of them, where there are
        enough counted intervals and printed figures to set against the counter; else None."""
        if len(self._sightings) - 1 < MIN_INTERVALS:
            return None
        start, end = self._sightings[0][0], self._sightings[-1][0]
        spanned = [p for p in self._printed if start < p.time <= end]
        if len(spanned) < MIN_INTERVALS:
            return None
        return sum(p.seconds for p in spanned) / len(spanned), spanned[-1]

    def _printed_over_time(self) -> float | None:
        """The printed figures of the window weighted by the time each stood (from the line before to it): the mean
        the per-line one is checked against (see _ratio)."""
        start, end = self._sightings[0][0], self._sightings[-1][0]
        weighted = total = 0.0
        before = start
        for printed in self._printed:
            if start < printed.time <= end:
                weighted += printed.seconds * (printed.time - before)
                total += printed.time - before
                before = printed.time
        return weighted / total if total > 0 else None

    def _trailing_ratio(self) -> float | None:
        """How far the newest printed figures (the mean of the last HOLD_LINES) stand from the counter's pace over the
        trailing span that fits them best: spans ending at the newest sighting, of TRAILING_MIN_STEPS steps at least,
        doubling back to the window's start. None where the window holds no such span.

        A figure that is a moving average over its own span (the demo's 10 s, Megatron's log interval) describes the
        last stretch, not the window: where the pace sped up, every figure still held the slow start while the
        counter's window took in the fast end, and both means over the window stood 1.2 to 1.5× the counter (a
        loaded CI run: the demo's printed 34 ms against the counter's 27 ms). A figure that is simply wrong (the model
        step alone, a micro-step) fits no span of the counter."""
        newest_time, newest_step = self._sightings[-1]
        recent = [p.seconds for p in islice(reversed(self._printed), HOLD_LINES)]
        if not recent:
            return None
        printed = sum(recent) / len(recent)
        best: float | None = None
        back = TRAILING_FIRST_SIGHTINGS
        while True:
            index = max(0, len(self._sightings) - 1 - back)
            then_time, then_step = self._sightings[index]
            if newest_step - then_step >= TRAILING_MIN_STEPS and newest_time > then_time:
                pace = (newest_time - then_time) / (newest_step - then_step)
                ratio = max(printed, pace) / min(printed, pace)
                best = ratio if best is None else min(best, ratio)
            if index == 0:
                return best
            back *= 2

    def _ratio(self, per_line: float, counted: float) -> float:
        """How far the printed figures stand from the counter, as a ratio of at least 1: by their mean per line, and
        by their mean over time, whichever is nearer the counter (1.0 where the two stand on either side of it).
        Per line is exact for a figure printed per step (nanoGPT's dt: the lines' mean is the window's time over
        its steps, however the steps alternate); a figure that is itself a moving average (the demo's, Megatron's
        over its log interval) weighs fast stretches more per line, since their lines are denser: on a pace that
        varied with a loaded CI machine's load, the demo's printed 10 s means averaged 34 ms per line against the
        counter's 42 ms, and a disagreement was claimed. Over time that figure comes right; a per-step figure that
        alternates (batches in pairs) comes out long there. A real disagreement shows in both."""
        over_time = self._printed_over_time()
        if over_time is None or over_time <= 0:
            ratio = max(per_line, counted) / min(per_line, counted)
        elif (per_line - counted) * (over_time - counted) <= 0:
            return 1.0
        else:
            ratio = min(max(per_line, counted) / min(per_line, counted),
                        max(over_time, counted) / min(over_time, counted))
        return ratio

    def _judge_newest(self) -> None:
        if self._unjudged:
            self._unjudged = False
            self._judge()

    def _judge(self) -> None:
        """At a new step line: move the claim if the ratio has stood past the threshold that switches it (above
        DISAGREES to start, below AGREES to end) for HOLD_LINES lines in a row."""
        compared = self._printed_over_window()  # None below MIN_INTERVALS counted intervals: two sightings at least
        counted = self._counted() if compared is not None else 0.0
        if compared is None or compared[0] <= 0 or counted <= 0:
            self._held = 0  # no evidence at this line: a run of lines past a threshold is broken
            return
        ratio = self._ratio(compared[0], counted)
        if not self._claimed:
            # A claim starts only where no trailing span of the counter fits the newest figures either; once made it
            # ends by the window's means alone (a per-step figure's jitter fits some short span now and then, and
            # would end a steady claim).
            trailing = self._trailing_ratio()
            ratio = min(ratio, trailing) if trailing is not None else ratio
        if self._claimed and ratio < SAME_IN_WORDS:
            self._claimed, self._held = False, 0
            return
        past = ratio < AGREES if self._claimed else ratio > DISAGREES
        self._held = self._held + 1 if past else 0
        if self._held >= HOLD_LINES:
            self._claimed, self._held = not self._claimed, 0

    def _trim(self) -> None:
        """Keep the window: the newest sightings within window_s of the newest, and the one just before them as
        the window's start; printed figures from the window's start on."""
        if not self._sightings:
            return
        newest = self._sightings[-1][0]
        while len(self._sightings) > 2 and self._sightings[1][0] <= newest - self.window_s:
            self._sightings.popleft()
        start = self._sightings[0][0]
        while self._printed and self._printed[0].time < start:
            self._printed.popleft()


def duration_words(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 0.1 else f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"


def ratio_words(ratio: float) -> str:
    """A measured ratio as said: one decimal below 10 (1.3×, 6.4×), whole above (21×)."""
    return f"{ratio:.1f}×" if ratio < 10 else f"{ratio:.0f}×"


def disagreement_words(printed: float, counted: float, printed_from: str | None) -> str | None:
    """What a printed figure that disagrees with the counter over the window is, with the ratio measured:
    "the log's printed time averages 31 ms/step over the window, but the step counter moved every 0.64 s (21×
    longer): ...". StepPace decides whether they disagree (a claim, once made, holds down to AGREES); None only where
    the ratio would read "1.0×"."""
    if printed <= 0 or counted <= 0:
        return None
    ratio = max(printed, counted) / min(printed, counted)
    if ratio < SAME_IN_WORDS:
        return None
    bar = printed_from == BAR_RATE
    figure = BAR_RATE if bar else f"the log's {printed_from}" if printed_from else "the log's printed time"
    said = (f"{figure} averages {duration_words(printed)}/step over the window, but the step counter moved every "
            f"{duration_words(counted)} ({ratio_words(ratio)} {'longer' if counted > printed else 'shorter'})")
    if bar:
        why = "a bar's rate is its own moving average, weighted to its latest updates"
    elif counted > printed:
        why = ("the printed time covers part of each step (the forward+backward alone, or one of several "
               "micro-steps; data loading and what else runs between the lines are outside it)")
    else:
        why = ("the printed figure is longer than the steps take: it times one slower part and scales it to the "
               "step (the micro-batch that also runs the optimizer step, times the micro-batches), or spans more "
               "than one step")
    return f"{said}: {why}; the pace is the counter's"
