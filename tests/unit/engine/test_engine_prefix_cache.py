"""Interval prefix cache: longest-prefix lookup, refcounts, LRU (tail-first) eviction, events."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from smetric.engine import BlockCache, Piece, count_blocks, slice_blocks


class Recorder:
    def __init__(self) -> None:
        self.stored: list[Piece] = []
        self.removed: list[Piece] = []

    def blocks_stored(self, pieces: Sequence[Piece]) -> None:
        self.stored.extend(pieces)

    def blocks_removed(self, pieces: Sequence[Piece]) -> None:
        self.removed.extend(pieces)


def test_slice_and_count() -> None:
    p = ((10, 14), (20, 22))
    assert count_blocks(p) == 8
    assert slice_blocks(p, 0, 3) == [(10, 12)]
    assert slice_blocks(p, 3, 7) == [(13, 14), (20, 21)]
    assert slice_blocks(p, 0, 100) == [(10, 14), (20, 22)]
    assert slice_blocks(p, 8, 9) == []


def test_match_is_longest_cached_prefix_across_pieces() -> None:
    c = BlockCache(100)
    c.insert([(1, 10), (20, 25)])
    assert c.match([(1, 10), (20, 30)]) == 16  # stops inside the second piece
    assert c.match([(1, 5)]) == 5
    assert c.match([(2, 10)]) == 9  # chained ids: any cached id counts
    assert c.match([(11, 12)]) == 0
    assert c.match([(1, 10), (20, 30)], max_blocks=12) == 12
    # a gap in the middle of a piece ends the prefix
    assert c.match([(1, 10), (26, 27)]) == 10


def test_adjacent_inserts_coalesce_into_one_segment() -> None:
    c = BlockCache(None)
    for a in range(0, 1000, 10):
        c.insert([(a, a + 9)])
    assert c.segment_count == 1
    assert c.match([(0, 999)]) == 1000
    bounded = BlockCache(2000)
    for a in range(0, 1000, 10):
        bounded.insert([(a, a + 9)], pin=True)
    bounded.unpin([(0, 999)])  # released together: one LRU stamp, one segment
    assert bounded.segment_count == 1


def test_lru_evicts_least_recently_released_tail_first() -> None:
    rec = Recorder()
    c = BlockCache(10, rec)
    c.insert([(1, 4)], pin=True)  # session A
    c.insert([(100, 103)], pin=True)  # session B
    c.unpin([(1, 4)])  # A released first -> older
    c.unpin([(100, 103)])
    c.insert([(200, 205)])  # needs 6, only 2 free: evict 4 of A's blocks (the older)
    assert c.cached_blocks == 10
    assert c.match([(1, 4)]) == 0
    assert c.match([(100, 103)]) == 4
    assert rec.removed == [(1, 4)]
    c.insert([(300, 300)])  # evicts B's tail block first
    assert c.match([(100, 103)]) == 3
    assert rec.removed[-1] == (103, 103)
    assert rec.stored == [(1, 4), (100, 103), (200, 205), (300, 300)]


def test_pinned_blocks_are_never_evicted() -> None:
    c = BlockCache(6)
    c.insert([(1, 4)], pin=True)
    assert c.pinned_blocks == 4
    assert c.free_blocks() == 2
    assert c.insert([(10, 15)]) == 2  # only what fits is cached (documented fallback)
    assert c.match([(1, 4)]) == 4
    c.unpin([(1, 4)])
    assert c.pinned_blocks == 0
    c.insert([(20, 25)])
    assert c.match([(1, 4)]) == 0


def test_refcounts_stack() -> None:
    c = BlockCache(8)
    c.insert([(1, 4)], pin=True)
    c.pin([(1, 2)])
    c.unpin([(1, 4)])
    assert c.pinned_blocks == 2  # blocks 1-2 still referenced by the second user
    c.insert([(10, 17)])  # wants 8: may evict only 3-4 (unpinned) and nothing pinned
    assert c.match([(1, 2)]) == 2


def test_reserve_accounts_capacity_and_evicts_unpinned() -> None:
    c = BlockCache(10)
    c.insert([(1, 8)])  # unpinned: reusable
    assert c.reserve(6)
    assert c.cached_blocks + c.reserved_blocks <= 10
    assert c.used_blocks == 6
    assert not c.reserve(5)
    c.unreserve(6)
    assert c.usage == 0.0


def test_insert_pins_already_cached_blocks() -> None:
    c = BlockCache(10)
    c.insert([(1, 5)])
    assert c.insert([(1, 8)], pin=True) == 3
    assert c.pinned_blocks == 8


def test_negative_capacity_rejected() -> None:
    with pytest.raises(ValueError):
        BlockCache(-1)
