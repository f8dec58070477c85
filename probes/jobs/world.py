"""A job knows its world size: which ranks of the world this node should hold and does not hold.

Launchers give each rank the world size (WORLD_SIZE, OMPI_COMM_WORLD_SIZE, ...) and usually this node's share
(LOCAL_WORLD_SIZE, DeepSpeed's LOCAL_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE) and the node's number (GROUP_RANK,
DeepSpeed's CROSS_RANK). From those and the ranks seen on this node since gputop attached, :func:`account_world`
tells apart

* missing ranks: ones this node should hold that were never seen. The node holds the whole world (its share
  equals the world size), or the node's number places its block of ranks (torchrun and DeepSpeed give each node
  a contiguous block) and a rank of that block is absent: it exited before gputop attached;
* ranks elsewhere: the rest of a larger world, on other nodes (or, when no launcher says this node's share,
  simply not here): never called missing.

Where no launcher states this node's share, the job itself may show that it runs only on this machine
(probes/jobs/locality.py: a loopback MASTER_ADDR, connections only to this machine): the node then holds the
whole world, and an unseen rank is missing (not running). A rank found running on this machine outside the
watched tree (started from another terminal) is neither missing nor elsewhere: `outside`.

A rank seen and then gone is neither: the job diagnosis remembers it (rank_exited).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class WorldAccount:
    missing: tuple[int, ...] = ()  # ranks this node should hold, never seen here
    elsewhere: tuple[tuple[int, int], ...] = ()  # ranks on other nodes, as inclusive (first, last) ranges
    outside: tuple[int, ...] = ()  # ranks running on this machine outside the watched tree


def rank_ranges(ranks: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """(2, 3, 4, 7) -> ((2, 4), (7, 7)): a world of thousands of ranks stays a few numbers in every frame."""
    ranges: list[tuple[int, int]] = []
    for rank in sorted(set(ranks)):
        if ranges and rank == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], rank)
        else:
            ranges.append((rank, rank))
    return tuple(ranges)


def account_world(world_size: int | None, local_world_size: int | None, group_rank: int | None,
                  seen: Collection[int], outside: Collection[int] = ()) -> WorldAccount:
    """The ranks of a world of `world_size` that are missing from this node or live elsewhere, given this node's
    share (`local_world_size`, None when no launcher says), its number (`group_rank`), the ranks `seen` here and
    those running here `outside` the watched tree."""
    if world_size is None or world_size < 1:
        return WorldAccount()
    found_outside = tuple(sorted({rank for rank in outside if rank not in seen and 0 <= rank < world_size}))
    unseen = [rank for rank in range(world_size) if rank not in seen and rank not in found_outside]
    if not unseen:
        return WorldAccount(outside=found_outside)
    if local_world_size is None or local_world_size < 1:
        return WorldAccount(elsewhere=rank_ranges(unseen), outside=found_outside)
    if local_world_size >= world_size:
        return WorldAccount(missing=tuple(unseen), outside=found_outside)
    if group_rank is not None:
        block = range(group_rank * local_world_size, (group_rank + 1) * local_world_size)
        if all(rank in block for rank in seen):
            return WorldAccount(missing=tuple(rank for rank in unseen if rank in block),
                                elsewhere=rank_ranges(rank for rank in unseen if rank not in block),
                                outside=found_outside)
    return WorldAccount(elsewhere=rank_ranges(unseen), outside=found_outside)


class WorldWatch:
    """The world accounted across ticks: the ranks seen since attaching (one seen and then gone is not missing),
    and a missing rank named only on its second tick in a row: a launcher starts its ranks one after another, and
    a tree read between two starts lacks the later ones."""

    def __init__(self) -> None:
        self._seen: set[int] = set()
        self._missing_last_tick: set[int] = set()

    def unseen(self, world_size: int | None, ranks_now: Iterable[int]) -> tuple[int, ...]:
        """The ranks of the world never seen here, counting `ranks_now`."""
        seen = self._seen | set(ranks_now)
        return tuple(rank for rank in range(world_size or 0) if rank not in seen)

    def update(self, world_size: int | None, local_world_size: int | None, group_rank: int | None,
               ranks_now: Iterable[int], outside: Collection[int] = ()) -> WorldAccount:
        self._seen.update(ranks_now)
        world = account_world(world_size, local_world_size, group_rank, self._seen, outside)
        missing = tuple(rank for rank in world.missing if rank in self._missing_last_tick)
        self._missing_last_tick = set(world.missing)
        return WorldAccount(missing=missing, elsewhere=world.elsewhere, outside=world.outside)


def ranges_text(ranges: Iterable[tuple[int, int]]) -> str:
    """"2–3, 7" for ((2, 3), (7, 7))."""
    return ", ".join(str(first) if first == last else f"{first}–{last}" for first, last in ranges)
