"""collective_gaps(reading) -> the collectives some ranks wait in and others never entered, from the ranks'
Flight Recorders (Frame.collectives, read by probes/sensors/flight_recorder.py).

Every rank numbers its process group's collectives the same way (collective_seq_id), so comparing where each
rank stands names the gap: in group G, the highest collective any rank entered is #N; the ranks that entered
#N and have not completed it wait in it, and the ranks whose last entered collective is below N never joined.
A running job shows such gaps for a moment at every step (ranks reach a collective at different times): the
job's verdict uses them only once it has found the job hung (probes/diagnosis/job.py).

When some ranks' recorders could not be read and the readable ones all wait in #N, the gap names where they
wait and the unread ranks: those are where to look.

Pure: a reading in, frozen findings out, no I/O and no clock.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from probes.frame import CollectiveRecord, CollectivesReading, GroupCollectives

RANKS_LISTED = 4


@dataclass(frozen=True)
class CollectiveGap:
    """Collective #seq of one process group: entered by `waiting`, never by `missing`."""

    pg_id: str
    pg_name: str | None
    seq: int
    op: str
    input_bytes: int | None
    waiting: tuple[int, ...]  # ranks that entered it and wait (not completed)
    missing: tuple[tuple[int, int | None], ...]  # (rank, the last collective it entered) for those that never did
    waiting_since: float | None  # the earliest time a waiting rank entered it
    unread: tuple[int, ...] = ()  # ranks whose recorder could not be read: they may be either


def collective_gaps(reading: CollectivesReading | None) -> tuple[CollectiveGap, ...]:
    """Each process group's gap, if its ranks disagree on the last collective entered; () when none do."""
    if reading is None:
        return ()
    read = [(r.rank, r) for r in reading.ranks if r.available and r.rank is not None]
    unread = tuple(sorted(r.rank for r in reading.ranks if not r.available and r.rank is not None))
    groups: dict[str, list[tuple[int, GroupCollectives]]] = {}
    for number, rank in read:
        for group in rank.groups:
            groups.setdefault(group.pg_id, []).append((number, group))
    gaps = []
    for pg_id, members in groups.items():
        entered = [g.last_entered for _, g in members if g.last_entered is not None]
        if not entered:
            continue
        seq = max(entered)
        waiting = [(rank, g) for rank, g in members
                   if g.last_entered == seq and (g.last_completed is None or g.last_completed < seq)]
        missing = tuple(sorted((rank, g.last_entered) for rank, g in members
                               if g.last_entered is None or g.last_entered < seq))
        # Nobody known to be missing, but ranks unread: still where the readable ones wait.
        if not waiting or not (missing or unread):
            continue
        found = [_record_of(g.pending, seq) or (g.last if g.last is not None and g.last.seq == seq else None)
                 for _, g in waiting]
        records = [r for r in found if r is not None]
        first = records[0] if records else None
        since = [r.entered_at for r in records if r.entered_at is not None]
        pg_name = next((g.pg_name for _, g in members if g.pg_name), None)
        gaps.append(CollectiveGap(
            pg_id=pg_id, pg_name=pg_name, seq=seq, op=first.op if first is not None else "a collective",
            input_bytes=first.input_bytes if first is not None else None,
            waiting=tuple(sorted(rank for rank, _ in waiting)), missing=missing,
            waiting_since=min(since) if since else None, unread=unread))
    return tuple(sorted(gaps, key=lambda g: (g.waiting_since is None, g.waiting_since or 0.0, g.pg_id)))


def _record_of(records: tuple[CollectiveRecord, ...], seq: int) -> CollectiveRecord | None:
    return next((r for r in records if r.seq == seq), None)


def _ranks(numbers: Sequence[int]) -> str:
    shown = [str(n) for n in list(numbers)[:RANKS_LISTED]]
    if len(numbers) > RANKS_LISTED:
        shown.append(f"{len(numbers) - RANKS_LISTED} more")
    return ("rank " if len(numbers) == 1 else "ranks ") + ", ".join(shown)


def size_text(n: int | None) -> str | None:
    """'25 MB', '4.0 kB', '12 B' (decimal units, as the sizes of messages are usually said)."""
    if n is None:
        return None
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            value = n / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{n} B"


def gap_line(gap: CollectiveGap) -> str:
    """'rank 1 never entered all_reduce #412 (process group 0, 25 MB; its last: #411); ranks 0, 2, 3 wait in it
    since 12:04:31 (Flight Recorder)'."""
    details = [f"process group {gap.pg_id}" + (f" {gap.pg_name}" if gap.pg_name and gap.pg_name != gap.pg_id
                                                 and gap.pg_name != "default_pg" else "")]
    size = size_text(gap.input_bytes)
    if size:
        details.append(size)
    lasts = {last for _, last in gap.missing}
    if gap.missing and len(lasts) == 1:
        (last,) = lasts
        details.append("its last: none" if last is None else f"its last: #{last}")
    missing = [rank for rank, _ in gap.missing]
    verb = "waits" if len(gap.waiting) == 1 else "wait"
    if missing:
        line = (f"{_ranks(missing)} never entered {gap.op} #{gap.seq} ({', '.join(details)}); "
                f"{_ranks(gap.waiting)} {verb} in it")
    else:
        line = f"{_ranks(gap.waiting)} {verb} in {gap.op} #{gap.seq} ({', '.join(details)})"
    if gap.waiting_since is not None:
        line += " since " + time.strftime("%H:%M:%S", time.localtime(gap.waiting_since))
    line += " (Flight Recorder)"
    if gap.unread:
        line += f"; {_ranks(gap.unread)} not read"
    return line
