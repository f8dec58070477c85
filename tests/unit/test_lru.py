"""probes/lru.py: bounded, least recently used first, full once filled, and safe between threads."""

from __future__ import annotations

import threading

import pytest

from probes.lru import LruCache


def test_a_new_entry_pushes_out_the_least_recently_used_one():
    cache: LruCache[str, int] = LruCache(2)
    assert cache.get_or_build("a", lambda: 1) == 1
    assert cache.get_or_build("b", lambda: 2) == 2
    assert cache.get_or_build("a", lambda: 99) == 1  # a hit: "a" is now the newest, "b" the oldest
    assert cache.get_or_build("c", lambda: 3) == 3
    assert len(cache) == 2
    assert cache.get_or_build("a", lambda: 99) == 1  # kept
    assert cache.get_or_build("b", lambda: 20) == 20  # pushed out by "c", built afresh


def test_it_stays_full_once_filled_rather_than_emptying():
    cache: LruCache[int, int] = LruCache(8)
    sizes = []
    for i in range(100):
        cache.get_or_build(i, lambda i=i: i)
        sizes.append(len(cache))
    assert sizes[:8] == list(range(1, 9))
    assert set(sizes[8:]) == {8}


def test_a_cache_holds_at_least_one_entry():
    with pytest.raises(ValueError):
        LruCache(0)


def test_threads_sharing_it_keep_it_bounded_and_consistent():
    cache: LruCache[int, int] = LruCache(16)
    errors: list[BaseException] = []

    def hammer(offset: int) -> None:
        try:
            for i in range(5000):
                key = (i * 7 + offset) % 40
                assert cache.get_or_build(key, lambda key=key: key * 2) == key * 2
        except BaseException as error:  # reported by the test thread below
            errors.append(error)

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(cache) == 16
