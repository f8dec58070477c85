"""Where a straggler rank spends the time the other ranks do not: its excess place (issue 39).

Every rank runs the same loop, so the busiest place of the late rank's samples is no reason it is late where the
others spend as much there (backward, which every rank runs, and whose all-reduce samples py-spy may read awake).
The place named is the one where its share of samples most exceeds the other ranks' average share: the ranks
step together (each waits for the slowest in the all-reduce), so a share of samples is a share of the same step
time on every rank.

The shares rest on PLACE_MIN_SAMPLES of the straggler's samples at least: the verdict's 10 s stack window where it
holds that many (at the fast 5 Hz), else the frames before it too, back to PLACE_WINDOW_S at most and never past
the latest phase-change mark (the sampler settles to 1 Hz only once the picture holds still). At the settled rate
the 10 s window holds about 13 samples a rank, and a place worth about 40% of the straggler's step and 7% of the
other's came out 39% against 23% (3 of rank 0's 13 samples), behind a DataLoader wait at 23% against 0% (3
samples): the named place flipped with a sample or two (a real accelerate job beside two busy processes). On 40
samples a share is known within about 8 points.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from probes.diagnosis.frame_stacks import frames_sampled_enough, main_thread_counts
from probes.diagnosis.stacks import ACTIVITIES, COMMS, ThreadProfile, format_where, place_key
from probes.diagnosis.windows import recent
from probes.frame import Frame, StackFrame

PLACE_MIN_SAMPLES = 40
PLACE_WINDOW_S = 60.0
# The straggler's place is its own only where the other ranks spend less than this share of its time there.
SHARED_PLACE_RATIO = 0.5
# A second place is named beside the first where its excess is at least this share of the first's: 4 of 13 samples
# in one place and 4 in another, each 1 of 13 on the other rank, are the same excess, and which of them came first
# is chance (a real accelerate job: its packing and freeing the packed rows, 6 times rank 0's of each).
RUNNER_UP_RATIO = 0.5


class RankTimes(NamedTuple):
    """One rank as the place is read: its own history (a RankHistory), its PID, and its main thread's profile over
    the verdict's window, whose way of waiting for the others (peer_wait) classifies the longer window's samples."""

    history: Sequence[Frame]
    pid: int
    profile: ThreadProfile


@dataclass(frozen=True)
class PlaceShare:
    """One place: the straggler's share of its samples there, and the other ranks' average share there."""

    where: str
    share: float
    usual: float

    @property
    def excess(self) -> float:
        return self.share - self.usual


@dataclass(frozen=True)
class ExcessPlace:
    """Where the straggler spends more of its time than the others do: the place of the largest excess, and a second
    whose excess comes within RUNNER_UP_RATIO of it (on a few samples the two are not told apart), over `samples` of
    its own in `seconds`."""

    places: tuple[PlaceShare, ...]
    samples: int
    seconds: float

    @property
    def shared(self) -> bool:
        """The others spend about as much of their time in its first place (two data-starved ranks, each waiting for
        its batch and then for the other in the all-reduce): a cause they share, not this rank's own."""
        first = self.places[0]
        return first.usual >= first.share * SHARED_PLACE_RATIO


def excess_place(slow: RankTimes, others: Sequence[RankTimes]) -> ExcessPlace:
    """The straggler's excess place (and a runner-up within RUNNER_UP_RATIO), over the frames that give its main
    thread PLACE_MIN_SAMPLES samples (see the module docstring), and the same span of each other rank's own history (a
    rank on another node: its node's)."""
    start = _start(slow)
    mine = _profile(slow, start)
    theirs = [_place_shares(_profile(other, start), waits_too=True) for other in others]
    places = []
    for spot, (share, pair) in _place_shares(mine).items():
        average = sum(t.get(spot, (0.0, pair))[0] for t in theirs) / max(1, len(theirs))
        places.append(PlaceShare(format_where(*pair), share, average))
    places.sort(key=lambda place: -place.excess)  # stable: of equal excesses, the place first sampled first
    seconds = slow.history[-1].time - start
    if not places:
        return ExcessPlace((PlaceShare("an unknown frame", 0.0, 0.0),), mine.samples, seconds)
    best = places[0]
    runner_up = [p for p in places[1:2] if best.excess > 0 and p.excess >= RUNNER_UP_RATIO * best.excess
                 and p.usual < p.share * SHARED_PLACE_RATIO]
    return ExcessPlace((best, *runner_up), mine.samples, seconds)


def _start(rank: RankTimes) -> float:
    """Where the frames the place is read over begin (a frame counts where its time is later): the verdict's stack
    window's start, or earlier until the rank's main thread has PLACE_MIN_SAMPLES samples, within PLACE_WINDOW_S
    and after the latest phase-change mark."""
    frames = frames_sampled_enough(rank.history, rank.pid, PLACE_MIN_SAMPLES, PLACE_WINDOW_S)
    return frames[0].time - frames[0].interval_s if frames else rank.history[-1].time


def _profile(rank: RankTimes, start: float) -> ThreadProfile:
    """The rank's main thread over its frames that end after `start`, classified as its own profile classifies."""
    profile = ThreadProfile(peer_wait=rank.profile.peer_wait)
    for frame in recent(rank.history, PLACE_WINDOW_S):
        if frame.time > start:
            for count in main_thread_counts(frame, rank.pid):
                profile.add(count)
    return profile


def _place_shares(main: ThreadProfile, waits_too: bool = False
                  ) -> dict[tuple, tuple[float, tuple[StackFrame | None, StackFrame | None]]]:
    """{spot: (share of all the thread's samples there, its commonest exact frames)} over its working activities
    (all but the collectives; with `waits_too`, the collectives as well), spots grouped by function and file as
    ThreadProfile.top groups them. The straggler's places are where it works; the others' are where they spend
    their time, waiting included: a waiting rank's backward is mostly DDP's all-reduce waiting for the straggler, and
    counted as work only, the straggler's own backward (which every rank runs) looked like its excess (23 to 38% of
    its samples against 0%, 3 of 10 runs of a real accelerate job beside two busy processes)."""
    exact: Counter = Counter()
    for activity in ACTIVITIES:
        if activity != COMMS or waits_too:
            exact.update(main.where.get(activity, {}))
    spots: dict[tuple, tuple[float, tuple[StackFrame | None, StackFrame | None]]] = {}
    for pair, samples in exact.items():
        spot = place_key(*pair)
        share, best = spots.get(spot, (0.0, pair))
        best = pair if exact[pair] > exact.get(best, 0) else best
        spots[spot] = (share + samples / max(1, main.samples), best)
    return spots
