"""NCCL's own view of the job, where its RAS port answered (NCCL 2.24 and later; probes/sensors/nccl_ras.py asks it
every ~10 s and the frames carry the text as received), joined with the stacks: the processes NCCL considers dead or
unresponsive, and a rank that stays behind the others on a kind of collective, with where its main thread is.

A lag of one operation in one reading is the normal skew of a busy job (RAS samples each process at a slightly
different moment): a rank is said to be behind only where it is so in two readings in a row with the leaders' count
standing still (the job waits for it), or by two operations or more. Where RAS did not answer, nothing is said of it.

Pure: frames in, lines out.
"""

from __future__ import annotations

from collections.abc import Sequence

from probes.diagnosis.frame_stacks import frame_stacks
from probes.diagnosis.stacks import ThreadProfile, format_where
from probes.frame import Frame
from probes.sensors.nccl_ras_text import RasProcess, RasStatus, parse_ras_status

PREFIX = "NCCL (its RAS port): "
LAG_SAID_AT = 2  # operations behind in one reading that are said at once


def nccl_lines(history: Sequence[Frame]) -> list[str]:
    """What NCCL's latest answered reading says that matters, in words."""
    readings = [f.nccl_ras for f in history if f.nccl_ras is not None and f.nccl_ras.answered]
    if not readings:
        return []
    now = parse_ras_status(readings[-1].raw)
    if not now.recognized:
        return []
    before = parse_ras_status(readings[-2].raw) if len(readings) > 1 else None
    lines = []
    if now.dead_count:
        lines.append(f"{PREFIX}{now.dead_count} job process{'es' if now.dead_count > 1 else ''} considered dead"
                     + _named(now.dead))
    if now.unresponsive_count:
        lines.append(f"{PREFIX}{now.unresponsive_count} job process{'es' if now.unresponsive_count > 1 else ''} "
                     "not answering" + _named(now.unresponsive))
    lines += _lags(now, before, history)
    return lines


def _named(processes: Sequence[RasProcess]) -> str:
    if not processes:
        return ""
    return ": " + "; ".join(f"PID {p.pid} on node {p.node} (GPU {p.gpus})" for p in processes[:3])


def _lags(now: RasStatus, before: RasStatus | None, history: Sequence[Frame]) -> list[str]:
    lines = []
    for comm, lag in now.lagging():
        stayed = before is not None and any(
            earlier.hash == comm.hash and old.operation == lag.operation and old.lead == lag.lead
            and old.count == lag.count
            for earlier, old in before.lagging())
        if not stayed and lag.behind < LAG_SAID_AT:
            continue
        who = (f"rank{'s' if len(lag.ranks) > 1 else ''} {', '.join(map(str, lag.ranks))}" if lag.ranks
               else f"{lag.n_ranks} rank{'s' if lag.n_ranks > 1 else ''}")
        where = _where(history, lag.ranks[0]) if len(lag.ranks) == 1 else ""
        standing = f", for two readings with the others at operation {lag.lead}: the job waits for it" if stayed \
            else f" (the others at operation {lag.lead})"
        lines.append(f"{PREFIX}{who} {'is' if len(lag.ranks) == 1 else 'are'} {lag.behind} {lag.operation}"
                     f"{'s' if lag.behind > 1 else ''} behind on communicator {comm.hash}{standing}{where}")
    return lines


def _where(history: Sequence[Frame], rank: int) -> str:
    """", its main thread in X (file:line)" from the rank's latest main-thread samples on this node, where seen."""
    latest = history[-1]
    process = next((p for p in latest.processes if p.rank == rank and p.alive), None)
    if process is None:
        return ""
    profile = ThreadProfile()
    for frame in reversed(history[-10:]):
        counts = frame_stacks(frame, process.pid).main_counts
        for count in counts:
            profile.add(count)
        if profile.samples:
            break
    if not profile.samples:
        return ""
    responsible, user_frame, _ = profile.top(*profile.by_activity)
    return f"; its main thread is in {format_where(responsible, user_frame)}" if responsible or user_frame else ""
