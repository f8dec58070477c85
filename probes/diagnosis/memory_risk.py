"""Memory as a risk: the job's resident memory growing, at a rate measured over the History, toward its memory
cgroup's limit, said with the time left at that rate ("its DataLoader workers grow 8.1 MB/s together; the cgroup's
512 MB limit is reached in ~33 s at that rate").

The rate is probes/sensors/memory_growth.py's: claimed only where the fit over its window is steady (three standard
errors from zero, the same direction in each half, a few MiB at least), so a sawtooth, a step or the allocator's drift
is never called growth. Who grows is said: the main process, the DataLoader workers together, or the whole tree. The
headroom is the limit less what the cgroup holds that the kernel cannot reclaim (its page cache can be: a job that
reads its dataset through the cache is not running out).

A forked DataLoader worker that only reads its parent's dataset grows without its resident bytes moving: its parent's
pages, shared and counted in its RSS from the fork, turn into its own copies as Python writes the reference count of
each object it reads (copy-on-read). That growth is read from each worker's smaps_rollup (private and shared bytes,
read every few seconds: probes/sensors/proctree.py SMAPS_EVERY_S) and named where memory_growth.copy_on_read says
its private bytes grow as its shared ones fall: "its 4 DataLoader workers grow 1.2 MB/s together: their parent's
pages turning private as they read them (copy-on-read: ...)".

Pure: frames in, a MemoryRisk out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from probes.frame import ROLE_DATALOADER_WORKER, ROLE_MAIN, Frame
from probes.machine_records import MemoryReading
from probes.sensors.memory_growth import WINDOW_S, Growth, copy_on_read, memory_growth

# A limit reached within this long at the measured rate is the headline: the job will die before anything else
# shown matters.
HEADLINE_WITHIN_S = 30 * 60.0

COPY_ON_READ_WORDS = ("their parent's pages turning private as they read them (copy-on-read: Python's reference "
                      "counts write to every object a worker touches)")


@dataclass(frozen=True)
class MemoryRisk:
    """Who grows, how fast, and when the limit is reached at that rate (None: no limit read)."""

    who: str  # "its 4 DataLoader workers together", "the main process", "its processes together"
    rate_bytes_per_s: float
    window_s: float
    limit_bytes: int | None
    limit_source: str | None
    seconds_to_limit: float | None
    # The DataLoader workers whose pages turn private (copy-on-read), of how many, and their private bytes' rate
    # together (within rate_bytes_per_s); 0 and None where none does.
    copy_on_read_workers: int = 0
    workers: int = 0
    copy_on_read_bytes_per_s: float | None = None

    @property
    def imminent(self) -> bool:
        return self.seconds_to_limit is not None and self.seconds_to_limit <= HEADLINE_WITHIN_S

    def words(self) -> str:
        grow = f"memory: {self.who} grow{'s' if self.who.startswith('the ') else ''} " \
               f"{byte_words(self.rate_bytes_per_s)}/s (over the last {self.window_s:.0f} s)"
        if self.copy_on_read_bytes_per_s is not None:
            workers = _workers(self.copy_on_read_workers, self.workers)
            if self.copy_on_read_bytes_per_s == self.rate_bytes_per_s:
                together = " together" if self.copy_on_read_workers > 1 else ""
                grow = (f"memory: {workers} grow{'s' if self.copy_on_read_workers == 1 else ''} "
                        f"{byte_words(self.rate_bytes_per_s)}/s{together} (over the last {self.window_s:.0f} s): "
                        f"{COPY_ON_READ_WORDS}")
            else:
                grow += f", {byte_words(self.copy_on_read_bytes_per_s)}/s of it {workers}' copy-on-read: " + \
                    COPY_ON_READ_WORDS.split(" (", 1)[0]
        if self.limit_bytes is None or self.seconds_to_limit is None:
            return grow + "; no memory limit read for it"
        where = f" (set on {self.limit_source})" if self.limit_source else ""
        return (f"{grow}; its memory cgroup's {byte_words(self.limit_bytes)} limit{where} is reached in "
                f"~{duration_words(self.seconds_to_limit)} at that rate")


def memory_risk(history: Sequence[Frame]) -> MemoryRisk | None:
    """The growth the frames show, or None where nothing grows steadily."""
    if not history:
        return None
    newest = history[-1].time
    frames = [f for f in history if f.time >= newest - WINDOW_S]
    memory = history[-1].memory
    series = {
        "workers": _series(frames, lambda role: role == ROLE_DATALOADER_WORKER),
        "main": _series(frames, lambda role: role == ROLE_MAIN),
        "tree": _series(frames, lambda role: True),
    }
    grown = {name: memory_growth(points) for name, points in series.items() if points}
    tree = grown.get("tree")
    workers = _count(history[-1], ROLE_DATALOADER_WORKER)
    copied = _copy_on_read(frames)
    headroom = _headroom(memory)
    if copied is not None:
        count, copy_rate, span = copied
        # A copied page leaves the worker's resident bytes as they were: whatever the tree's RSS adds is more.
        extra = tree.rate_bytes_per_s if tree is not None and tree.growing and tree.rate_bytes_per_s else 0.0
        rate = copy_rate + extra
        who = "its processes together" if extra else f"its {count} DataLoader workers"
        return MemoryRisk(who, rate, tree.span_s if extra and tree is not None else span, memory.limit_bytes,
                          memory.limit_source, max(0.0, headroom / rate) if headroom is not None else None,
                          count, workers, copy_rate)
    if tree is None or not tree.growing or tree.rate_bytes_per_s is None:
        return None
    if grown.get("workers") is not None and grown["workers"].growing and not _grows(grown.get("main")):
        who = f"its {workers} DataLoader worker{'s' if workers != 1 else ''}" + (" together" if workers > 1 else "")
    elif _grows(grown.get("main")) and not _grows(grown.get("workers")):
        who = "the main process"
    else:
        who = "its processes together"
    rate = tree.rate_bytes_per_s
    return MemoryRisk(who, rate, tree.span_s, memory.limit_bytes, memory.limit_source,
                      max(0.0, headroom / rate) if headroom is not None else None)


def _grows(growth: Growth | None) -> bool:
    return growth is not None and growth.growing


def _series(frames: Sequence[Frame], role_wanted: Callable[[str], bool]) -> list[tuple[float, float]]:
    """(time, resident bytes summed over the live processes whose role is wanted), one point per frame that read any;
    a frame where one of them was not read is left out rather than summed short."""
    points = []
    for frame in frames:
        chosen = [p for p in frame.processes if p.alive and p.state != "zombie" and role_wanted(p.role)]
        if chosen and all(p.rss_bytes is not None for p in chosen):
            points.append((frame.time, float(sum(p.rss_bytes or 0 for p in chosen))))
    return points


def _copy_on_read(frames: Sequence[Frame]) -> tuple[int, float, float] | None:
    """(the workers whose pages turn private, their private bytes' rate together, the longest span fitted) over the
    frames, from each live worker's smaps_rollup reads; None where no worker's do."""
    reads: dict[int, list[tuple[float, _Split]]] = {}
    live = {p.pid for p in frames[-1].processes if p.alive and p.role == ROLE_DATALOADER_WORKER} if frames else set()
    for frame in frames:
        for p in frame.processes:
            if p.pid in live and p.role == ROLE_DATALOADER_WORKER and p.private_bytes is not None \
                    and p.shared_bytes is not None:
                reads.setdefault(p.pid, []).append((frame.time, _Split(p.private_bytes, p.shared_bytes)))
    found = [copy_on_read(samples) for samples in reads.values()]
    turning = [f for f in found if f.turning_private and f.private.rate_bytes_per_s is not None]
    if not turning:
        return None
    return (len(turning), sum(f.private.rate_bytes_per_s or 0.0 for f in turning),
            max(f.private.span_s for f in turning))


@dataclass(frozen=True)
class _Split:
    private_bytes: int
    shared_bytes: int


def _workers(turning: int, workers: int) -> str:
    """"its 4 DataLoader workers", "3 of its 4 DataLoader workers", "its DataLoader worker"."""
    if turning >= workers:
        return f"its {turning} DataLoader workers" if turning > 1 else "its DataLoader worker"
    return f"{turning} of its {workers} DataLoader workers"


def _count(frame: Frame, role: str) -> int:
    return sum(1 for p in frame.processes if p.alive and p.role == role)


def _headroom(memory: MemoryReading) -> float | None:
    """Bytes left under the limit that the kernel cannot make by reclaiming page cache; None without a limit."""
    if memory.limit_bytes is None:
        return None
    used = memory.limit_usage_bytes if memory.limit_usage_bytes is not None else memory.usage_bytes
    if used is None:
        return None
    # The page cache read is the target's own group's: it is part of the limit's usage only where the limit is set
    # on that group (or the group is the only one under it).
    own_limit = memory.limit_source is None or memory.cgroup_path is None or \
        memory.limit_source.rstrip("/").endswith(memory.cgroup_path.rstrip("/"))
    reclaimable = (memory.file_bytes or 0) if own_limit else 0
    return max(0.0, memory.limit_bytes - (used - reclaimable))


def byte_words(value: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def duration_words(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
