"""time_shares(history) -> TimeShares: over the last minutes, the share of wall time the main thread spent in
each phase of a training loop (compute, data, checkpoint, evaluation, compile, collectives, logging, waiting for
the GPU, idle), the phases that come back (a checkpoint every few iterations) with their period, and what the
verdict's fix can win at most.

A verdict names the current window's majority; a checkpoint of 3 s every 18 s is never that majority, yet it
costs a sixth of the run. This looks over the whole History window instead, from the main thread's sampled
stacks: each sample counts for 1/rate seconds (the sampler's rate adapts), put in a phase by its activity
(probes/diagnosis/stacks.py) or, for evaluation and logging, by an outer frame (is_evaluation, is_logging). A sample
py-spy calls idle is waiting for the GPU where the GPU it runs on was busy in that frame (gpu_summary.py
waits_on_busy_gpu): a GPU-bound step blocks in CUDA synchronisations with the GIL released, and that is not idle.
Samples importing modules outside any phase (start-up) are no phase of the loop and are left out.

Pure: frames in, a TimeShares out, no clock reads. Summaries of a frame are memoised by its stacks' identity.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from probes.diagnosis.bottlenecks import FACTS_BY_NAME
from probes.diagnosis.evidence import main_pid_of
from probes.diagnosis.frame_stacks import main_thread_counts
from probes.diagnosis.gpu_summary import target_gpu_util_pct, waits_on_busy_gpu
from probes.diagnosis.phases import PHASE_WORDS, PHASES, Phase, phase_label
from probes.diagnosis.stacks import (
    CHECKPOINT,
    COMMS,
    COMPILE,
    COMPUTE,
    DATA_PREP,
    DATA_WAIT,
    IO,
    QUEUE_WAIT,
    WAIT,
    classify_cached,
    importing_from,
    is_evaluation,
    is_logging,
)
from probes.frame import Bottleneck, Frame, SampledWindow, StackCount
from probes.recent import recent_frames

SHARES_WINDOW_S = 120.0  # "the last minutes": long enough to hold several cycles of a periodic phase
MAX_SHARES_FRAMES = 600  # bounds the walk whatever the tick
_PHASE_OF_ACTIVITY: dict[str, Phase] = {
    COMPUTE: "compute", DATA_WAIT: "data", DATA_PREP: "data", QUEUE_WAIT: "data", IO: "data",
    CHECKPOINT: "checkpoint", COMPILE: "compile", COMMS: "collectives", WAIT: "idle",
}
# Phases that recur are looked for among the ones a training step does not do every step.
PERIODIC_PHASES: tuple[Phase, ...] = ("checkpoint", "evaluation", "compile", "logging", "data", "collectives")
# A stack window shows a phase when this share of its samples is in it; the phase recurs when it shows in at
# least RECURRING_EPISODES separate runs of windows, with windows without it between.
EPISODE_SHARE = 0.1
RECURRING_EPISODES = 2
# torch.compile's warm-up compiles one graph per kind of call, each on its first call, with work between them (the
# eval graph, an evaluation, then the training graph; the forward, then the backward): two runs of compiling are
# that warm-up, not a period. Compile recurs from a third run on.
RECURRING_EPISODES_OF = {"compile": 3}
# A run of windows showing a phase ends only where the windows without it hold this much of the main thread's
# sampled time: a real stretch of other work. The sampler's gaps inside one long phase are not its end: a window of
# 1-5 samples at the settled rate, of which one or two are a stack py-spy caught mid-change (a leaf frame that names
# no phase, or none), split the one 30 s compile of tests/fixtures/h200/gpt2xl_s1 into two runs "every 14 s".
RECURRING_GAP_S = 3.0
RECURRING_MIN_SHARE = 0.03  # smaller recurring phases are not worth a line
# A gap between two episodes' starts this many times the shortest one or more holds an episode no window saw.
MISSED_EPISODE_RATIO = 1.5
MAX_FIXABLE_SHARE = 0.99  # a phase of all the time would promise an infinite speed-up
MIN_SAID_SHARE = 0.005  # a phase below this reads "0% of the time": no gain is said for its fix
# With k of n samples outside a phase, the time outside it is below _OUTSIDE_UPPER_95[k] / n at 95% (Poisson's
# one-sided upper limits for 0, 1, 2 events). Under 3 samples outside, 1/(1-s) rests on one or two samples, or on
# none (a bound that read "up to 100×" from MAX_FIXABLE_SHARE on a job whose main thread waited in every sample):
# the fix is said to win at least n / limit, what the samples do show.
_OUTSIDE_UPPER_95 = (3.0, 4.74, 6.30)
# The fewest main-thread samples in the window before the shares bound what a fix can win. The bound 1/(1-s) rests
# on the samples outside the phase, which few samples miss: a phase at 87% (a 7.7× bound) leaves no sample outside
# it in 4 samples more than half the time (0.87^4 = 0.57), and the bound read "up to 100×" (issue 31); in 30, 1.5%
# of the time (0.87^30). Under 30 the shares are shown and no gain is: at 5 Hz that is 6 s, at the settled 1 Hz
# half a minute.
SPEEDUP_MIN_SAMPLES = 30
# py-spy samples in windows with a start-up between them (a second or more on a crowded machine), and a phase that
# falls in those gaps is in no share: the summary says what part of the time went unsampled once it is this much.
SAID_UNSAMPLED_SHARE = 0.1


@dataclass(frozen=True)
class RecurringPhase:
    """A phase that comes back: its share of the window, its period, and how many times it was seen."""

    phase: Phase
    share: float
    period_s: float
    episodes: int


@dataclass(frozen=True)
class TimeShares:
    """Shares of the main thread's wall time per phase over `window_s` seconds (they sum to 1)."""

    window_s: float
    shares: dict[str, float]
    recurring: tuple[RecurringPhase, ...] = ()
    gpu_util_pct: float | None = None  # the target's GPUs over the window, mean, where NVML reads them
    samples: int = 0  # the main thread's samples the shares rest on
    # The part of the time from the first window's start to the last one's end that no py-spy window of the main
    # process covered (None: the frames keep no windows, as recordings made before them).
    unsampled: float | None = None

    def share(self, *phases: str) -> float:
        return sum(self.shares.get(phase, 0.0) for phase in phases)


@dataclass(frozen=True)
class MaxSpeedup:
    """The most the verdict's fix can win (or, where too few samples fall outside its phase, the least):
    `factor` times faster, and why, in words."""

    factor: float
    words: str
    at_least: bool = False  # `factor` is what the samples show the fix wins at least, not the most it can


# (id of a frame's stacks, main PID, its GPU busy) -> seconds by phase
_summaries: dict[tuple[int, int, bool], dict[Phase, float]] = {}


def _phase_seconds(frame: Frame, main_pid: int) -> dict[Phase, float]:
    """Seconds of the main thread's samples in this frame, by phase (memoised while the frame lives)."""
    gpu_busy = waits_on_busy_gpu(frame, main_pid)
    # Unique while the stacks live, and the entry goes when they do; the GPU's part of the key because a job's
    # per-rank frames share one frame's stacks with each rank's own GPUs.
    key = (id(frame.stacks), main_pid, gpu_busy)
    found = _summaries.get(key)
    if found is not None:
        return found
    per_sample = _seconds_per_sample(frame, main_pid)
    seconds: dict[Phase, float] = {}
    for count in _step_counts(frame, main_pid):
        activity = classify_cached(count.frames, count.idle).activity
        phase = _PHASE_OF_ACTIVITY.get(activity, "compute")
        if phase not in ("checkpoint", "compile") and is_evaluation(count.frames):
            phase = "evaluation"  # evaluation computes and loads batches too: its outer frame names it
        elif phase in ("compute", "idle") and is_logging(count.frames):
            phase = "logging"
        if phase == "idle" and gpu_busy:
            phase = "gpu_wait"  # blocked while its GPU runs kernels: a CUDA synchronisation, not idleness
        seconds[phase] = seconds.get(phase, 0) + count.count * per_sample
    _summaries[key] = seconds
    weakref.finalize(frame.stacks, _summaries.pop, key, None)
    return seconds


def _seconds_per_sample(frame: Frame, main_pid: int) -> float:
    """The wall time one of the main thread's samples in this frame stands for: the seconds the process's windows
    that ended this tick sampled (py-spy's start-up left out: unsampled_share says it) over their samples. A wake
    cuts a window at 20 Hz where the picture moves and the settled ones run at 5 Hz or less, so a tick can hold
    windows of both; weighed by one rate for the whole tick (the newest window's), a 1.75 s tick of 23 samples
    counted 5 s, and a checkpoint's share came out 2x the log's. The tick's rate where the frame has no windows (a
    recording made before they were kept)."""
    windows = [w for w in frame.stacks.windows if w.pid == main_pid and w.samples > 0]
    if windows:
        return sum(_sampled_seconds(w) for w in windows) / sum(w.samples for w in windows)
    rate = frame.stacks.achieved_rate_hz or frame.stacks.rate_hz
    return 1.0 / rate if rate else 1.0


def _step_counts(frame: Frame, main_pid: int) -> list[StackCount]:
    """The main thread's counts that belong to the training loop's time: not those importing modules outside any
    phase. Start-up imports are a one-time cost no fix removes, and on a crowded machine importing torch took over
    30 s: counted as compute, half a 40 s window of a job that then waited for data in every sample read "it holds
    the step 29% of the time", and the gain 1.4×. A phase that imports lazily (compiling) keeps its samples."""
    return [count for count in main_thread_counts(frame, main_pid)
            if classify_cached(count.frames, count.idle).activity != COMPUTE or importing_from(count.frames) is None]


def time_shares(history: Sequence[Frame], main_pid: int | None = None,
                window_s: float = SHARES_WINDOW_S) -> TimeShares | None:
    """The time shares over the last `window_s` of `history` (oldest first); None without stack samples."""
    if not history:
        return None
    frames = recent_frames(history, window_s, MAX_SHARES_FRAMES)
    if main_pid is None:
        main_pid = _watched_pid(frames[-1])
    per_frame = [(frame, _phase_seconds(frame, main_pid)) for frame in frames]
    samples = sum(count.count for frame in frames for count in _step_counts(frame, main_pid))
    totals: dict[Phase, float] = {}
    for _, seconds in per_frame:
        for phase, spent in seconds.items():
            totals[phase] = spent + totals.get(phase, 0)
    total = sum(totals.values())
    if total <= 0:
        return None
    shares: dict[str, float] = {phase: totals[phase] / total for phase in PHASES if totals.get(phase, 0) > 0}
    span = frames[-1].time - (frames[0].time - frames[0].interval_s)
    return TimeShares(window_s=span, shares=shares, recurring=_recurring(per_frame, shares),
                      gpu_util_pct=target_gpu_util_pct(frames), samples=samples,
                      unsampled=unsampled_share(frames, main_pid))


def unsampled_share(frames: Sequence[Frame], pid: int) -> float | None:
    """The part of the time from the first of the process's py-spy windows in `frames` starting to the last one
    ending that no window sampled: each py-spy's start-up (attaching, reading the interpreter) and the moments
    between one window and the next, where a phase goes unseen. None with fewer than two windows."""
    windows = [w for frame in frames for w in frame.stacks.windows if w.pid == pid]
    if len(windows) < 2:
        return None
    first = reach = min(w.started for w in windows)
    spans = sorted(_sampled_span(w) for w in windows)
    covered = 0.0
    for start, end in spans:  # the union of the spans, walked in order of their starts
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    whole = reach - first
    return max(0.0, 1.0 - covered / whole) if whole > 0 else None


def _sampled_seconds(window: SampledWindow) -> float:
    """How long the window sampled: from its first sample to its end (the whole window where that is not known)."""
    return window.seconds if window.sampled_seconds is None else window.sampled_seconds


def _sampled_span(window: SampledWindow) -> tuple[float, float]:
    """When the window sampled, as wall-clock times."""
    end = window.started + window.seconds
    return end - _sampled_seconds(window), end


def _watched_pid(frame: Frame) -> int:
    """Whose main thread the shares follow: a distributed job's lowest rank here (the tree's root is its
    launcher, which only waits), else the training process."""
    ranks = [(p.rank, p.pid) for p in frame.processes if p.rank is not None and p.alive]
    return min(ranks, key=lambda rank_pid: rank_pid[0])[1] if ranks else main_pid_of(frame)


def _recurring(per_frame: list[tuple[Frame, dict[Phase, float]]],
               shares: dict[str, float]) -> tuple[RecurringPhase, ...]:
    """Phases that show in separate runs of stack windows, RECURRING_GAP_S of other work at least between two
    runs: their starts give the period."""
    found = []
    for phase in PERIODIC_PHASES:
        if shares.get(phase, 0.0) < RECURRING_MIN_SHARE:
            continue
        starts: list[float] = []
        away = RECURRING_GAP_S  # seconds sampled outside the phase since it last showed; the first run starts one
        for frame, seconds in per_frame:
            window = sum(seconds.values())
            if not window:
                continue  # no window landed this tick: neither in the phase nor out of it
            if seconds.get(phase, 0) / window >= EPISODE_SHARE:
                if away >= RECURRING_GAP_S:
                    starts.append(frame.time)
                away = 0.0
            else:
                away += window
        if len(starts) >= RECURRING_EPISODES_OF.get(phase, RECURRING_EPISODES):
            found.append(RecurringPhase(phase, shares[phase], _period(starts), len(starts)))
    return tuple(sorted(found, key=lambda r: -r.share))


def _period(starts: list[float]) -> float:
    """The period of episodes starting at `starts` (two at least, in order): the mean of the gaps of one period.
    A short phase can fall between two stack windows and go unseen, and a gap over it spans two periods or more: a
    200 MB save every 15 s read "every ~31 s" as the mean of all gaps. The shortest gap is one period; gaps under
    1.5 of it are single periods, the rest hold missed episodes and are left out."""
    gaps = sorted(later - earlier for earlier, later in pairwise(starts))
    single = [gap for gap in gaps if gap < MISSED_EPISODE_RATIO * gaps[0]]
    return sum(single) / len(single)


def _pct(share: float) -> str:
    return f"{share * 100:.0f}%"


def _span(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def recurring_lines(shares: TimeShares, bottleneck: Bottleneck) -> list[str]:
    """'also: saving a checkpoint 15% of the last 2 min, every ~18 s', for each recurring phase that is not
    the verdict's own."""
    facts = FACTS_BY_NAME.get(bottleneck)
    own = facts.fix_removes.phases if facts is not None and facts.fix_removes is not None else ()
    return [f"also: {PHASE_WORDS[r.phase]} {_pct(r.share)} of the last {_span(shares.window_s)}, "
            f"every ~{r.period_s:.0f} s" for r in shares.recurring if r.phase not in own]


def max_speedup(shares: TimeShares | None, bottleneck: Bottleneck) -> MaxSpeedup | None:
    """The most the verdict's fix can win, from the measured shares: a fix that removes a phase taking a share s
    of the time makes the run at most 1/(1-s) times faster. A busy GPU: what runs outside it (1 - util) is all
    that anything else can win. None where the verdict's fix has no measured phase, or its share rests on fewer
    than SPEEDUP_MIN_SAMPLES samples; the least it wins (`at_least`) where under 3 samples fall outside the phase.
    What a bottleneck's fix removes is its BottleneckFacts' (probes/diagnosis/rules/)."""
    facts = FACTS_BY_NAME.get(bottleneck)
    if shares is None or facts is None:
        return None
    if facts.gpu_busy and shares.gpu_util_pct is not None:
        busy = max(1.0 - MAX_FIXABLE_SHARE, min(1.0, shares.gpu_util_pct / 100.0))
        return MaxSpeedup(1.0 / busy, f"nothing outside the GPU can win more than {_pct(1.0 / busy - 1.0)} "
                                      f"(it is busy {_pct(busy)} of the time)")
    removes = facts.fix_removes
    if removes is None or shares.samples < SPEEDUP_MIN_SAMPLES:
        return None
    share = min(MAX_FIXABLE_SHARE, shares.share(*removes.phases))
    if share < MIN_SAID_SHARE:
        return None  # it would read "takes 0% of the time": nothing measured to win
    measured = shares.share(*removes.phases)
    why = removes.why.format(pct=_pct(measured))
    outside = round(shares.samples * (1.0 - measured))
    if outside < len(_OUTSIDE_UPPER_95):
        # Too few samples outside the phase to place the bound: the step's own time is only known to be small.
        factor = shares.samples / _OUTSIDE_UPPER_95[outside]
        return MaxSpeedup(factor, f"at least {_times(factor)}× faster (a 95% lower bound) {why}; {outside} of "
                                  f"{shares.samples} samples (last {_span(shares.window_s)}) fell outside it: more "
                                  "cannot be measured",
                          at_least=True)
    factor = 1.0 / (1.0 - share)
    return MaxSpeedup(factor, f"up to {_gain(factor)} faster {why}")


def _times(factor: float) -> str:
    return f"{factor:.1f}" if factor < 10 else f"{factor:.0f}"


def _gain(factor: float) -> str:
    """A gain as said: "2.5×"; below 1.1× in percent ("4%"), where one decimal would read "up to 1.0× faster" (a
    demo's 4% checkpoint share said just that)."""
    return f"{_times(factor)}×" if factor >= 1.1 else _pct(factor - 1.0)


def shares_summary(shares: TimeShares) -> str:
    """'time, last 2 min: compute 75% · checkpoint 15% (every ~18 s) · evaluation 10%', largest first; with
    '(of the 88% sampled)' where py-spy's gaps left SAID_UNSAMPLED_SHARE of the time or more unseen."""
    periods = {r.phase: r.period_s for r in shares.recurring}
    parts = [f"{phase_label(phase)} {_pct(share)}" + (f" (every ~{periods[phase]:.0f} s)" if phase in periods else "")
             for phase, share in sorted(shares.shares.items(), key=lambda item: -item[1]) if share >= 0.005]
    sampled = ""
    if shares.unsampled is not None and shares.unsampled >= SAID_UNSAMPLED_SHARE:
        sampled = f" (of the {_pct(1.0 - shares.unsampled)} sampled)"
    return f"time, last {_span(shares.window_s)}{sampled}: " + " · ".join(parts)
