"""The words for the ranks of a known world that a job's verdict does not see, so that none is left unexplained.

From the JobInfo (probes/jobs/world.py, probes/jobs/locality.py): a missing rank (never seen here) is gone before
gputop attached, or, where the job shows it runs only on this machine, not running, with how that is known; a
helper such a rank left running holds its connections open (what keeps the others waiting); a rank runs on this
machine outside the watched tree (named with its PID); the rest are not on this node. probes/diagnosis/job.py puts
them in the rank_exited finding and after any job verdict's headline. Pure: a JobInfo in, sentences out.
"""

from __future__ import annotations

from collections.abc import Sequence

from probes.frame import JobInfo
from probes.jobs.world import ranges_text


def numbers_text(numbers: Sequence[int], limit: int) -> str:
    """'rank 1', 'ranks 1, 3', 'ranks 1, 2, 3, 4, 6 more' (the first `limit` named)."""
    shown = [str(n) for n in numbers[:limit]]
    if len(numbers) > limit:
        shown.append(f"{len(numbers) - limit} more")
    return ("rank " if len(numbers) == 1 else "ranks ") + ", ".join(shown)


def missing_head(job: JobInfo, missing: Sequence[int], limit: int) -> tuple[str, str]:
    """(what the missing ranks are, the words after "waits" that say for whom): "rank 1 of 2 is not running (the
    job runs only on this machine: MASTER_ADDR 127.0.0.1)" and " for it" where the job showed where it runs, else
    "rank 1 of 2 is gone (exited before attach)" (its launcher placed it on this node) and ""."""
    verb = "is" if len(missing) == 1 else "are"
    if job.one_machine is None:
        return f"{numbers_text(missing, limit)} of {job.world_size} {verb} gone (exited before attach)", ""
    return (f"{numbers_text(missing, limit)} of {job.world_size} {verb} not running (the job runs only on this "
            f"machine: {job.one_machine})", " for it" if len(missing) == 1 else " for them")


def missing_advice(job: JobInfo, missing: Sequence[int], limit: int) -> str:
    """Where to look for why the missing ranks are not there."""
    named = numbers_text(missing, limit)
    if job.one_machine is None:
        why = (f"Find why {named} ended before gputop attached: the launcher's output has its exit code and "
               "traceback")
    else:  # started by hand: no launcher kept its output, and it may never have started
        why = (f"Find why {named} {'is' if len(missing) == 1 else 'are'} not running: the terminal or log it was "
               "started from has its exit code and traceback (if it was started at all)")
    return f"{why}; dmesg shows whether the OOM killer ended it."


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
                     f"{'is' if count == 1 else 'are'} not on this node")
    return lines
