"""A bounded, least-recently-used cache for the tables gputop keeps for as long as it runs.

Why least-recently-used rather than "clear when full" or generations: a long run's memory should reach its
level early and stay there. A table emptied wholesale (or a generation dropped at once) rises and falls by its
whole size, and its freed blocks leave holes that the next fill does not fit exactly, so the process's resident
memory kept climbing for an hour after the traced heap had stopped (benchmarks/heap_soak.py; docs/benchmarks.md,
"An hour without growth"). A table that gives up one entry for each new one is full from its first minutes on,
and each new entry takes the place of one of much the same size.

Safe to share between threads: the samplers' threads parse py-spy's output side by side.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """At most ``capacity`` entries; a hit makes an entry the newest, a new entry pushes out the oldest."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("an LruCache holds at least one entry")
        self.capacity = capacity
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get_or_build(self, key: K, build: Callable[[], V]) -> V:
        """The value kept for ``key``, or ``build()``'s, kept from now on. ``build`` runs outside the lock: two
        threads that miss the same key at once both build, and the later one's value is kept."""
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found
        value = build()
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return value
