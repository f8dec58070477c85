"""Sampling a whole tree at the cost of a few processes: which process may start a py-spy window now.

Pure: no processes, no files, no clock of its own (``now`` is any monotonic time). probes/sampling/sampling_policy.py
decides each process's own rate and window length; this decides, over the set of processes, who samples at all,
so that a node's job (8 ranks x 8 DataLoader workers: 73 processes) costs about what a dozen would. The stack
sampler (probes/sampling/pyspy.py) asks :meth:`TreeSamplingPolicy.wait_s` before each record window and each dump of a
process, and tells it when a window starts and ends and what it showed; the engine says each tick which
process plays which part (:meth:`set_roles`) and which ones' cheap signals moved (:meth:`called_up`).

* DataLoader workers of one training process that look alike (their latest windows agree on the dominant
  position: the same innermost busy frame, or all waiting) take turns: one at a time per training process, the
  one left longest without a window goes next, and its window is one ``turn_window_s`` long at the settled rate.
  So every alike worker gets a window at least once per ``rotation_bound_s`` (its alike siblings x (turn_window_s +
  TURN_START_SLACK_S)); off turn it gets neither windows nor dumps. A worker not seen yet, or whose picture
  differs from its siblings', is sampled on its own, as if alone.
* Ranks that agree (settled, and their latest picture is another rank's too) rest between windows: one window
  length, or more when more than ``RANK_WINDOWS_AT_ONCE`` agree (:func:`rank_rest_windows`: 8 agreeing ranks
  rest three windows, 30 s settled, so about two are in a window at once). A rank that differs from every other
  rank does not rest.
* A process whose cheap per-tick signals moved (CPU%, wake-ups, I/O: probes/sampling_policy.PhaseChangeDetector)
  is called up: it samples at once, as if alone, until one window of its own after the call has finished. A wake
  goes back to the fast rate only for what moved (spared_by_wake): on a busy machine some rank's CPU moves every
  few seconds, and waking all eight ranks each time cost more than the rest of the sampling.
* Alike workers rest ``turn_rest_s`` between one's turn and the next.
* Over the whole tree at most ``node_turns`` alike workers' turns run at once (rotation across ranks, not only
  per rank): on a node's job the eight ranks' workers look alike too, and eight turns at a time were a third of
  the samplers' cost. Training processes waiting for a free turn get it first come, first served.
* A worker taking turns is called up only by a move of its signals that holds two ticks (:meth:`steady_pids`,
  the detector's ``steady``): one tick of a worker's CPU jittering on a busy machine called it up before.

With no roles set (one process, or a caller that does not say) everyone samples at once, as before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

# A worker's turn: one window of this length at the settled rate (1 Hz: probes/sampling_policy.SETTLED_RATE_HZ),
# whatever its own policy would plan: its siblings' windows already showed what it runs, so it need not be looked
# at closely, and py-spy's start (~0.03 core-s on a torch process) is most of a window's cost. 10 s, a settled
# window: with 5 s and the first look's 1-4 s windows, workers' turns on a node's job started every ~2 s.
TURN_WINDOW_S = 10.0
# Time for a window's py-spy to start and write, on top of its length, when bounding the rotation.
TURN_START_SLACK_S = 2.0
# Alike workers of one training process rest this long between one's turn and the next: their windows say the
# same thing, and on a node's job (8 ranks: 8 turns at any moment, each a py-spy start of ~0.03 core-s) the turns
# were most of the samplers' cost. A worker whose own signals move is still called up at once.
TURN_REST_S = 5.0
# A process waiting for its turn asks again this often: a call-up is acted on within it.
POLL_S = 1.0
# A worker taking turns dumps (py-spy dump, ~0.035 core-s: more than its turn's samples) at most this often: its
# windows say what it runs, and the dump's idle flags matter little where the queue's wait is a known wait.
ROTATING_DUMP_EVERY_S = 60.0
# Alike workers' turns running at once over the whole tree, whatever their training process. Two: a node's eight
# ranks each get a worker's turn every ~48 s instead of every ~17 s (the bound per worker, rotation_bound_s, is
# 8 x ceil(8 / 2) x (10 s + 2 s) = 384 s for 8 x 8, 136 s for one rank's 8 workers); a worker whose own signals
# move is still called up at once, turn or not.
NODE_TURNS = 2
# Agreeing ranks' windows running at once, about: each rests rank_rest_windows() of its windows after one. Their
# windows say the same thing, and on a node's job (8 ranks each in a window half the time) the ranks' windows were
# the largest share of the samplers' cost (0.02-0.03 of 0.074 core). A rank that starts to differ, or whose own
# signals move, samples at once.
RANK_WINDOWS_AT_ONCE = 2


def rank_rest_windows(agreeing_ranks: int) -> int:
    """How many of its own windows a rank that agrees with others rests after each: one, or more when so many
    agree that more than ``RANK_WINDOWS_AT_ONCE`` of them would be in a window at once (8 agreeing ranks: 3, so
    each samples a quarter of the time and about two windows run at any moment)."""
    return max(1, -(-agreeing_ranks // RANK_WINDOWS_AT_ONCE) - 1)


# A process's part in the tree's policy: a DataLoader worker of a known training process, or a rank.
TreePart = Literal["worker", "rank"]
# What the engine says each tick: each process's part, with a worker's training process (None for a rank), or None
# (it samples on its own).
TreeRoles = Mapping[int, tuple[TreePart, int | None] | None]


@dataclass
class _Member:
    role: TreePart | None = None  # None: samples on its own
    owner: int | None = None  # a worker's training process
    picture: Hashable | None = None  # the dominant position of its latest finished window
    seen: bool = False  # a window of it has finished
    settled: bool = False
    in_window: bool = False
    started_at: float | None = None  # when its latest window started
    rest_s: float = 0.0  # an agreeing rank's rest after a window: that window's length
    last_end: float | None = None  # when its latest window (or turn) ended
    called_at: float | None = None  # its signals moved: on its own until a window started after this ends
    turn_granted_at: float | None = None  # it was given one of the tree's turns (node_turns): until its window ends


class TreeSamplingPolicy:
    """Who of a process tree may start a record window or a dump now; see the module docstring.

    Not thread-safe: the sampler calls it under its own lock.
    """

    def __init__(self, turn_window_s: float = TURN_WINDOW_S, turn_rest_s: float = TURN_REST_S,
                 node_turns: int = NODE_TURNS) -> None:
        self.turn_window_s = turn_window_s
        self.turn_rest_s = turn_rest_s
        self.node_turns = max(1, node_turns)
        self._members: dict[int, _Member] = {}
        # rotating(owner) as last worked out, and the workers by owner it was worked out from: dropped whenever a
        # member's part, picture, seen or called_at changes (each worker's sampler thread asks wait_s every
        # second, and working it out walks every member: on a node's job it was a tenth of gputop's own CPU)
        self._rotating: dict[int | None, frozenset[int]] = {}
        self._workers_by_owner: dict[int, list[int]] | None = None
        # training processes whose next worker waits for a free turn: owner -> (first asked, last asked)
        self._turn_queue: dict[int, tuple[float, float]] = {}

    # --- what the engine says -----------------------------------------------------------------------------

    def set_roles(self, roles: TreeRoles) -> None:
        """Each process's part: ("worker", its training process's pid), ("rank", None), or None (on its own).
        Processes not named are forgotten."""
        gone = [p for p in self._members if p not in roles]
        for pid in gone:
            del self._members[pid]
        changed = bool(gone)
        for pid, role in roles.items():
            member = self._members.setdefault(pid, _Member())
            part = (role[0], role[1]) if role is not None else (None, None)
            if (member.role, member.owner) != part:
                member.role, member.owner = part
                changed = True
        if changed:  # the engine says the roles every tick; the same roles keep what was worked out
            self._forget_rotating()

    def called_up(self, pids: Iterable[int], now: float) -> None:
        """These processes' cheap signals moved: they sample at once, on their own, until one window of theirs
        that started after now has finished."""
        for pid in pids:
            member = self._members.get(pid)
            if member is not None:
                member.called_at = now
                self._forget_rotating()

    # --- what the sampler says ------------------------------------------------------------------------------

    def window_started(self, pid: int, now: float) -> None:
        member = self._member(pid)
        member.in_window, member.started_at = True, now

    def window_finished(self, pid: int, picture: Hashable | None, settled: bool, now: float) -> None:
        """A window of ``pid`` ended with samples; ``picture`` is its dominant position, ``settled`` whether the
        process's own policy has settled."""
        member = self._member(pid)
        self._forget_rotating()
        started = member.started_at
        member.in_window, member.last_end, member.turn_granted_at = False, now, None
        member.rest_s = now - started if started is not None else 0.0
        member.picture, member.seen, member.settled = picture, True, settled
        if member.called_at is not None and started is not None and started >= member.called_at:
            member.called_at = None  # it has had its own look since the call

    # --- the decision --------------------------------------------------------------------------------------

    def wait_s(self, pid: int, now: float, dump: bool = False) -> float:
        """0 when ``pid`` may start a window (``dump``: a dump) now, else how long to wait before asking again.
        A resting rank still dumps: a dump is its current stack, which a hang verdict reads."""
        member = self._members.get(pid)
        if member is None or member.called_at is not None or not member.seen:
            return 0.0
        if member.role == "worker" and member.owner is not None:
            return self._worker_wait_s(pid, member, now, dump)
        if member.role == "rank" and not dump:
            return self._rank_wait_s(pid, member, now)
        return 0.0

    def dump_wait_s(self, pid: int, own_wait_s: float) -> float:
        """Seconds between a process's dumps: its own policy's, longer for a worker taking turns."""
        member = self._members.get(pid)
        if member is not None and pid in self.rotating(member.owner):
            return max(own_wait_s, ROTATING_DUMP_EVERY_S)
        return own_wait_s

    def spared_by_wake(self, moved: Iterable[int]) -> set[int]:
        """The processes a wake for ``moved`` need not wake: every worker and every rank that did not move (its own
        signals say its picture holds: ranks that change phase together each move by themselves, and one that
        starts to differ is the one to look at), and when only workers and ranks moved, the launchers too (they
        wait for their children). A lone process that moved (one without a part) wakes everyone, as before."""
        moved = set(moved)
        parts = {p for p, m in self._members.items() if m.role in ("worker", "rank")}
        spared = parts - moved
        if moved and moved <= parts:
            spared |= set(self._members) - moved
        return spared

    def turn_length_s(self, pid: int) -> float | None:
        """The length of ``pid``'s window when it is a rotating worker's turn (taken at the settled rate); None:
        not a turn, its own policy plans the window."""
        member = self._members.get(pid)
        if member is not None and pid in self.rotating(member.owner) and member.called_at is None:
            return self.turn_window_s
        return None

    def another_rank_shows(self, pid: int, picture: Hashable | None) -> bool:
        """``pid`` is a rank and another rank's latest window showed ``picture`` too."""
        member = self._members.get(pid)
        if member is None or member.role != "rank" or picture is None:
            return False
        return self._other_ranks_showing(pid, picture) > 0

    def _other_ranks_showing(self, pid: int, picture: Hashable) -> int:
        """How many ranks other than ``pid`` showed ``picture`` in their latest window."""
        return sum(1 for p, m in self._members.items()
                   if p != pid and m.role == "rank" and m.seen and m.picture == picture)

    def rotating(self, owner: int | None) -> frozenset[int]:
        """The workers of ``owner`` that take turns: seen, not called up, and showing their siblings' most common
        picture (a worker that differs is sampled on its own). Fewer than two alike: nobody rotates."""
        known = self._rotating.get(owner)
        if known is None:
            known = self._rotating[owner] = self._work_out_rotating(owner)
        return known

    def _work_out_rotating(self, owner: int | None) -> frozenset[int]:
        if self._workers_by_owner is None:
            self._workers_by_owner = {}
            for pid, member in self._members.items():
                if member.role == "worker" and member.owner:
                    self._workers_by_owner.setdefault(member.owner, []).append(pid)
        siblings = {p: self._members[p] for p in self._workers_by_owner.get(owner, ())} if owner else {}
        if len(siblings) < 2 or not all(m.seen for m in siblings.values()):
            return frozenset()
        common, _ = Counter(m.picture for m in siblings.values()).most_common(1)[0]
        alike = frozenset(p for p, m in siblings.items() if m.picture == common and m.called_at is None)
        return alike if len(alike) >= 2 else frozenset()

    def _forget_rotating(self) -> None:
        self._rotating.clear()
        self._workers_by_owner = None

    def _member(self, pid: int) -> _Member:
        member = self._members.get(pid)
        if member is None:
            member = self._members[pid] = _Member()
            self._forget_rotating()
        return member

    def steady_pids(self) -> set[int]:
        """Every worker taking turns now (over all training processes): their call-up wants a move that holds
        (probes/sampling_policy.PhaseChangeDetector's ``steady``)."""
        owners = {m.owner for m in self._members.values() if m.role == "worker" and m.owner}
        return set().union(*(self.rotating(owner) for owner in owners))

    def rotation_bound_s(self, owner: int | None) -> float:
        """The longest an alike worker of ``owner`` goes without a window: each sibling's turn, once round, where
        each turn waits for its own rest or, when more training processes rotate than ``node_turns``, its share
        of the tree's turns."""
        turn_s = self.turn_window_s + TURN_START_SLACK_S
        owners = {m.owner for m in self._members.values() if m.role == "worker" and m.owner}
        rotating_owners = sum(1 for o in owners if self.rotating(o))
        shared = -(-rotating_owners // self.node_turns) * turn_s  # ceil(owners / node_turns) turns
        return len(self.rotating(owner)) * max(turn_s + self.turn_rest_s, shared)

    def _worker_wait_s(self, pid: int, member: _Member, now: float, dump: bool = False) -> float:
        owner = member.owner
        rotating = self.rotating(owner)
        if owner is None or pid not in rotating:  # a worker of no known owner never rotates
            return 0.0
        if any(self._members[p].in_window for p in rotating if p != pid):
            return POLL_S  # a sibling has the turn
        last_turn_end = max((self._members[p].last_end or 0.0 for p in rotating), default=0.0)
        if now < last_turn_end + self.turn_rest_s:
            return min(POLL_S, last_turn_end + self.turn_rest_s - now)  # the siblings rest between turns
        # The turn goes to the sibling left longest without a window (pid order breaks ties: deterministic).
        next_up = min(rotating, key=lambda p: (self._members[p].last_end or 0.0, p))
        if next_up != pid:
            return POLL_S
        if dump:  # a rotating worker's rare dump (ROTATING_DUMP_EVERY_S) takes none of the tree's turns
            return 0.0
        wait_s = self._node_turn_wait_s(owner, now)
        if wait_s <= 0:
            member.turn_granted_at = now
        return wait_s

    def _node_turn_wait_s(self, owner: int, now: float) -> float:
        """0 when ``owner``'s next worker may take one of the tree's ``node_turns`` now (first come, first
        served among the training processes waiting), else POLL_S. A waiting owner that stops asking (its
        rotation ended, a worker was called up) leaves the queue after two polls."""
        # Granted turns until their window ends; a grant whose window never started lapses after two polls.
        busy = sum(1 for m in self._members.values() if m.turn_granted_at is not None
                   and (m.in_window or m.turn_granted_at >= now - 2 * POLL_S))
        for waiting in [o for o, (_, last) in self._turn_queue.items() if last < now - 2 * POLL_S]:
            del self._turn_queue[waiting]
        first, _ = self._turn_queue.get(owner, (now, now))
        self._turn_queue[owner] = (first, now)
        ahead = sum(1 for o, (f, _) in self._turn_queue.items() if o != owner and (f, o) < (first, owner))
        if ahead < self.node_turns - busy:
            del self._turn_queue[owner]
            return 0.0
        return POLL_S

    def _rank_wait_s(self, pid: int, member: _Member, now: float) -> float:
        if not member.settled or member.last_end is None or member.picture is None:
            return 0.0
        agreeing = self._other_ranks_showing(pid, member.picture)
        if not agreeing:
            return 0.0  # it differs from every other rank: where the question is
        remaining = member.last_end + member.rest_s * rank_rest_windows(agreeing + 1) - now
        return max(0.0, min(remaining, POLL_S))

    def window_dropped(self, pid: int) -> None:
        """A window of ``pid`` ended with nothing to show (it failed, or was ended before its first sample)."""
        member = self._members.get(pid)
        if member is not None:
            member.in_window, member.turn_granted_at = False, None
