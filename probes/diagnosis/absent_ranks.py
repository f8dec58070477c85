"""The words for the ranks of a known world that a job's verdict does not see, so that none is left unexplained.

From the JobInfo (probes/jobs/world.py, probes/jobs/locality.py) and the history it came in: a missing rank (not
running here now) that gputop saw running outside the watched tree exited, between the last frame that found it
running and the next (:func:`ranks_seen_gone`); one never seen is gone before gputop attached (its launcher placed
it here) or, where the job shows it runs only on this machine, not running, with how that is known; a helper such
a rank left running holds its connections open (what keeps the others waiting); a rank runs on this machine outside
the watched tree (named with its PID); the rest are not on this node. probes/diagnosis/job.py puts them in the
rank_exited finding and after any job verdict's headline; the Ranks pane (tui/panes/ranks.py) words each missing
rank with :func:`missing_rank_words`. Pure: a JobInfo and frames in, sentences out.

The history holds ten minutes of frames; past them, when a rank was last seen running is kept by
:class:`SeenRunning`, a bounded record the Monitor carries from frame to frame (probes/monitoring/monitor.py), so a
rank that exited stays "exited at 12:00:04" for as long as gputop runs, not "not running" once its frames age out.
A job merged across nodes words each node's missing ranks the same, with the node: "exited at 12:00:04 on n2"
(:func:`on_node`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from probes.frame import Frame, JobInfo
from probes.jobs.world import ranges_text

# A missing rank's words in the Ranks pane: placed here by its launcher and never seen (so gone before gputop
# attached), or never seen on a job that runs only on this machine (whether it ever started is not known).
BEFORE_ATTACH_WORDS = "gone (exited before attach)"
NOT_RUNNING_WORDS = "not running"
ELSEWHERE_WORDS = "not on this node"


@dataclass(frozen=True)
class SeenGone:
    """A missing rank gputop saw running on this machine outside the watched tree (JobInfo.ranks_outside), and
    the frames on either side of its end: it exited after `running_at` and by `gone_at` (Unix times)."""

    rank: int
    pid: int
    running_at: float  # the last frame that found it running
    gone_at: float  # the frame after it: the first that did not


# The ranks whose last sighting SeenRunning keeps (those seen last are kept): a node's ranks started outside the
# watched tree are a handful; the bound only keeps a long run's record from growing with every rank it ever saw.
SEEN_RANKS_KEPT = 256


@dataclass(frozen=True)
class SeenRunning:
    """The last frame that found each rank running outside the watched tree, and the frame after it, for as long
    as gputop runs (the history drops frames older than its window). Immutable: after() gives the next record."""

    last: tuple[SeenGone, ...] = ()  # one a rank, by rank
    through: float | None = None  # the time of the latest frame read into it

    def after(self, frames: Sequence[Frame]) -> SeenRunning:
        """This record with the frames of `frames` (oldest first) it has not read yet: the Monitor calls it with
        its whole history each frame, and only the frames newer than `through` are read."""
        if not frames or (self.through is not None and frames[-1].time <= self.through):
            return self
        newer: dict[int, SeenGone] = {}
        for index in range(len(frames) - 2, -1, -1):  # a pair of frames: found running, then the next
            if self.through is not None and frames[index + 1].time <= self.through:
                break  # read before
            job = frames[index].job
            for rank, pid in job.ranks_outside if job is not None else ():
                newer.setdefault(rank, SeenGone(rank, pid, frames[index].time, frames[index + 1].time))
        kept = {gone.rank: gone for gone in self.last} | newer
        latest = sorted(kept.values(), key=lambda g: g.running_at)[-SEEN_RANKS_KEPT:]
        return SeenRunning(tuple(sorted(latest, key=lambda g: g.rank)), frames[-1].time)

    def of(self, ranks: Sequence[int]) -> dict[int, SeenGone]:
        wanted = set(ranks)
        return {gone.rank: gone for gone in self.last if gone.rank in wanted}


def clock(at: float) -> str:
    """A Unix time as this machine's wall clock reads it: "12:00:04"."""
    return time.strftime("%H:%M:%S", time.localtime(at))


def ranks_seen_gone(frames: Sequence[Frame], missing: Sequence[int],
                    seen: SeenRunning | None = None) -> dict[int, SeenGone]:
    """{rank: SeenGone} for each of the `missing` ranks that an earlier frame of `frames` (oldest first) found
    running outside the watched tree, or, where the frames that did are gone from the history, `seen` (the record
    that outlives it); a rank never seen running is not in it."""
    found: dict[int, SeenGone] = seen.of(missing) if seen is not None else {}
    wanted = set(missing)
    for index in range(len(frames) - 2, -1, -1):  # the latest frame is the one that names them missing
        if not wanted:
            break
        job = frames[index].job
        for rank, pid in job.ranks_outside if job is not None else ():
            if rank in wanted:
                wanted.discard(rank)
                found[rank] = SeenGone(rank, pid, frames[index].time, frames[index + 1].time)
    return found


def exit_words(gone: SeenGone) -> str:
    """"exited at 12:00:04" where the frames on either side of its end fall in one second, else "exited by
    12:00:05" (the first frame that found it gone): no more precise than what was measured."""
    at, by = clock(gone.running_at), clock(gone.gone_at)
    return f"exited at {by}" if at == by else f"exited by {by}"


def seen_words(gone: SeenGone) -> str:
    """How gputop knows it ran: "PID 4242, seen running outside the watched tree" (at 12:00:04, where that is
    another second than the one it was found gone in)."""
    at = clock(gone.running_at)
    return f"PID {gone.pid}, seen running outside the watched tree" + ("" if at == clock(gone.gone_at) else f" at {at}")


def missing_rank_words(job: JobInfo, rank: int, gone: Mapping[int, SeenGone]) -> str:
    """A missing rank in a few words, as measured: "exited by 12:00:05" (seen running, then gone), "not running"
    (never seen, on a job that runs only on this machine), "gone (exited before attach)" (never seen, placed on this
    node by its launcher)."""
    if rank in gone:
        return exit_words(gone[rank])
    return NOT_RUNNING_WORDS if job.one_machine is not None else BEFORE_ATTACH_WORDS


def numbers_text(numbers: Sequence[int], limit: int) -> str:
    """'rank 1', 'ranks 1, 3', 'ranks 1, 2, 3, 4, 6 more' (the first `limit` named)."""
    shown = [str(n) for n in numbers[:limit]]
    if len(numbers) > limit:
        shown.append(f"{len(numbers) - limit} more")
    return ("rank " if len(numbers) == 1 else "ranks ") + ", ".join(shown)


def missing_head(job: JobInfo, missing: Sequence[int], limit: int, frames: Sequence[Frame] = (),
                 seen: SeenRunning | None = None) -> tuple[str, str]:
    """(what the missing ranks are, the words after "waits" that say for whom): "rank 1 of 2 exited by 12:00:05
    (PID 4242, seen running outside the watched tree at 12:00:04)" where `frames` show it ran, "rank 1 of 2 is
    not running (the job runs only on this machine: MASTER_ADDR 127.0.0.1)" and " for it" where the job showed where
    it runs, else "rank 1 of 2 is gone (exited before attach)" (its launcher placed it on this node) and "".
    `seen`: the record of when ranks were seen running that outlives `frames`."""
    gone = ranks_seen_gone(frames, missing, seen)
    never = [rank for rank in missing if rank not in gone]
    parts = [f"rank {g.rank} of {job.world_size} {exit_words(g)} ({seen_words(g)})"
             for g in sorted(gone.values(), key=lambda g: g.rank)[:limit]]
    if len(gone) > limit:
        parts.append(f"{numbers_text(sorted(gone)[limit:], limit)} exited too, after gputop saw them running")
    verb = "is" if len(never) == 1 else "are"
    if never and job.one_machine is None:
        parts.append(f"{numbers_text(never, limit)} of {job.world_size} {verb} gone (exited before attach)")
    elif never:
        parts.append(f"{numbers_text(never, limit)} of {job.world_size} {verb} not running (the job runs only on "
                     f"this machine: {job.one_machine})")
    told_where = bool(gone) or job.one_machine is not None
    return "; ".join(parts), (" for it" if len(missing) == 1 else " for them") if told_where else ""


def missing_advice(job: JobInfo, missing: Sequence[int], limit: int, frames: Sequence[Frame] = (),
                   seen: SeenRunning | None = None) -> str:
    """Where to look for why the missing ranks are not there."""
    gone = ranks_seen_gone(frames, missing, seen)
    never = [rank for rank in missing if rank not in gone]
    whys = []
    if gone:  # started apart, from a terminal or script of its own: no launcher kept its output
        whys.append(f"Find why {numbers_text(sorted(gone), limit)} exited: the terminal or log "
                    f"{'it was' if len(gone) == 1 else 'they were'} started from has the exit code and traceback")
    if never and job.one_machine is None:
        whys.append(f"Find why {numbers_text(never, limit)} ended before gputop attached: the launcher's output "
                    "has its exit code and traceback")
    elif never:  # started by hand: no launcher kept its output, and it may never have started
        whys.append(f"Find why {numbers_text(never, limit)} {'is' if len(never) == 1 else 'are'} not running: the "
                    "terminal or log it was started from has its exit code and traceback (if it was started at all)")
    return f"{'; '.join(whys)}; dmesg shows whether the OOM killer ended it."


def leftover_lines(job: JobInfo, limit: int) -> list[str]:
    """The helpers a missing rank left running with its environment, holding its connections open: what keeps
    the others waiting where its closed sockets would have failed their collective."""
    return [f"PID {pid} carries rank {rank}'s environment (a process rank {rank} left running) and holds TCP "
            "connections open" for rank, pid in job.rank_leftovers[:limit]]


def leftover_advice(job: JobInfo, backend: str | None, limit: int) -> str | None:
    """How to end the wait at once, where a leftover holds a gloo job's connections (gloo fails a collective as
    soon as its peer's sockets close: torch 2.13, "Connection reset by peer")."""
    if not job.rank_leftovers or backend != "gloo":
        return None
    pids = ", ".join(str(pid) for _, pid in job.rank_leftovers[:limit])
    return (f"Ending PID {pids} closes the connections it holds: gloo then fails the waiting collective at once "
            "(\"Connection reset by peer\") instead of at the timeout.")


def absent_ranks_lines(job: JobInfo, limit: int) -> list[str]:
    """The ranks of a known world neither seen here nor missing: those running on this machine outside the watched
    tree, and those not on this node (on other nodes, or where the job does not show where it runs)."""
    world = job.world_size
    if world is None:
        return []
    lines = [f"rank {rank} of {world} runs on this machine outside the watched tree (PID {pid}): gputop --pid "
             f"{pid} watches it" for rank, pid in job.ranks_outside[:limit]]
    if job.ranks_elsewhere:
        count = sum(last - first + 1 for first, last in job.ranks_elsewhere)
        lines.append(f"{'rank' if count == 1 else 'ranks'} {ranges_text(job.ranks_elsewhere)} of {world} "
                     f"{'is' if count == 1 else 'are'} {ELSEWHERE_WORDS}")
    return lines
