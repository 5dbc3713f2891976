"""Block-granular prefix cache over chained block ids, stored as intervals.

A prompt is a sequence of chained block ids given as inclusive ``(first, last)`` pieces (the
trace's run-length encoding). Because the ids are chained (an id stands for its whole prefix),
"is block x cached" is exact for any id, and the longest cached prefix of a prompt is found by
walking its pieces: one bisect per piece plus one dict lookup per cached segment boundary -- not
one Python operation per block (a 100k-token prompt is ~1,600 blocks but ~3 pieces).

Cached ids are kept as disjoint segments ``[start, end]``, each with a reference count (running
requests pinning it) and an LRU stamp. Adjacent segments with equal (refcount, stamp) merge, so a
session's chain stays a handful of segments. Eviction follows vLLM's free-block queue: the least
recently released unpinned segment goes first, tail blocks first.

Capacity accounting mirrors vLLM's block pool: ``pinned + reserved <= capacity`` where
``reserved`` counts blocks allocated to running requests but not (yet) holding a hashed prefix
(uncomputed prompt blocks, decode growth); unpinned cached blocks are free-but-reusable and are
evicted on demand. ``capacity_blocks=None`` means unbounded (never evicts).

Events: an optional :class:`KvEventSink` receives stored / removed pieces (the emulator turns
them into vLLM ``BlockStored`` / ``BlockRemoved`` KV events); ``None`` costs nothing.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Sequence
from typing import Protocol

Piece = tuple[int, int]
"""Inclusive run of consecutive block ids ``(first, last)``."""


class KvEventSink(Protocol):
    """Receives cache content changes (pieces of block ids, in the order they happen)."""

    def blocks_stored(self, pieces: Sequence[Piece]) -> None: ...

    def blocks_removed(self, pieces: Sequence[Piece]) -> None: ...


def slice_blocks(pieces: Sequence[Piece], start: int, stop: int) -> list[Piece]:
    """The pieces covering block *positions* ``[start, stop)`` of a prompt given by ``pieces``."""
    out: list[Piece] = []
    pos = 0
    for a, b in pieces:
        n = b - a + 1
        lo, hi = max(start, pos), min(stop, pos + n)
        if lo < hi:
            out.append((a + lo - pos, a + hi - pos - 1))
        pos += n
        if pos >= stop:
            break
    return out


def count_blocks(pieces: Sequence[Piece]) -> int:
    return sum(b - a + 1 for a, b in pieces)


class BlockCache:
    """Prefix cache of one tier (an instance's GPU tier, or the global tier)."""

    __slots__ = (
        "_clock",
        "_events",
        "_seg",
        "_starts",
        "cached_blocks",
        "capacity_blocks",
        "evicted_blocks",
        "pinned_blocks",
        "reserved_blocks",
    )

    def __init__(self, capacity_blocks: int | None, events: KvEventSink | None = None) -> None:
        if capacity_blocks is not None and capacity_blocks < 0:
            raise ValueError(f"capacity_blocks must be >= 0 or None, got {capacity_blocks}")
        self.capacity_blocks = capacity_blocks
        self._events = events
        self._starts: list[int] = []
        self._seg: dict[int, list[int]] = {}  # start -> [end, refcount, stamp]
        self._clock = 0
        self.cached_blocks = 0
        self.pinned_blocks = 0
        self.reserved_blocks = 0
        self.evicted_blocks = 0

    # ------------------------------------------------------------------ queries
    def set_events(self, events: KvEventSink | None) -> None:
        """Where stored / removed pieces are reported from now on (``None``: nowhere)."""
        self._events = events

    @property
    def used_blocks(self) -> int:
        """Blocks not reusable by a new request (vLLM's ``kv_cache_usage`` numerator)."""
        return self.pinned_blocks + self.reserved_blocks

    @property
    def usage(self) -> float:
        if not self.capacity_blocks:
            return 0.0
        return self.used_blocks / self.capacity_blocks

    @property
    def segment_count(self) -> int:
        return len(self._starts)

    def free_blocks(self) -> int:
        """Blocks a new allocation may take (unpinned cached blocks count as free)."""
        if self.capacity_blocks is None:
            return 1 << 62
        return self.capacity_blocks - self.used_blocks

    def _find(self, x: int) -> int | None:
        starts = self._starts
        i = bisect_right(starts, x) - 1
        if i >= 0:
            s = starts[i]
            if self._seg[s][0] >= x:
                return s
        return None

    def match(self, pieces: Sequence[Piece], max_blocks: int | None = None) -> int:
        """Length in blocks of the longest cached prefix of ``pieces`` (capped at ``max_blocks``)."""
        total = 0
        seg = self._seg
        cap = (1 << 62) if max_blocks is None else max_blocks
        for a, b in pieces:
            s = self._find(a)
            if s is None:
                break
            x, end = a, seg[s][0]
            while end < b:
                total += end - x + 1
                nxt = seg.get(end + 1)
                if nxt is None:
                    return min(total, cap)
                x, end = end + 1, nxt[0]
            total += b - x + 1
            if total >= cap:
                return cap
        return min(total, cap)

    def cached_count(self, pieces: Sequence[Piece]) -> int:
        """How many blocks of ``pieces`` are cached (anywhere in them, not only a prefix)."""
        n = 0
        starts, seg = self._starts, self._seg
        for a, b in pieces:
            i = bisect_right(starts, a) - 1
            if i < 0:
                i = 0
            while i < len(starts) and starts[i] <= b:
                s = starts[i]
                lo, hi = max(a, s), min(b, seg[s][0])
                if lo <= hi:
                    n += hi - lo + 1
                i += 1
        return n

    def uncached(self, pieces: Sequence[Piece]) -> list[Piece]:
        """The sub-pieces of ``pieces`` that are not cached, in order."""
        out: list[Piece] = []
        seg = self._seg
        for a, e in pieces:
            x = a
            while x <= e:
                s = self._find(x)
                if s is not None:
                    x = seg[s][0] + 1
                    continue
                i = bisect_right(self._starts, x)
                nxt = self._starts[i] if i < len(self._starts) else None
                g = e if nxt is None or nxt > e else nxt - 1
                out.append((x, g))
                x = g + 1
        return out

    # ------------------------------------------------------------------ mutation helpers
    def _split(self, x: int) -> None:
        """Make ``x`` the start of a segment if it lies inside one."""
        s = self._find(x)
        if s is None or s == x:
            return
        rec = self._seg[s]
        self._seg[x] = [rec[0], rec[1], rec[2]]
        rec[0] = x - 1
        insort(self._starts, x)

    def _coalesce(self, lo: int, hi: int) -> None:
        """Merge equal-metadata adjacent segments whose starts lie in ``[lo, hi + 1]``."""
        starts, seg = self._starts, self._seg
        i = max(0, bisect_right(starts, lo - 1) - 1)
        while i + 1 < len(starts) and starts[i] <= hi + 1:
            s, t = starts[i], starts[i + 1]
            r, q = seg[s], seg[t]
            if r[0] + 1 == t and r[1] == q[1] and (r[2] == q[2] or self.capacity_blocks is None):
                r[0] = q[0]
                del seg[t]
                del starts[i + 1]
            else:
                i += 1

    def _ref(self, pieces: Sequence[Piece], delta: int, restamp: bool) -> None:
        self._clock += 1
        stamp = self._clock
        starts, seg = self._starts, self._seg
        for a, e in pieces:
            self._split(a)
            self._split(e + 1)
            i = bisect_right(starts, a) - 1
            if i < 0 or starts[i] < a:
                i += 1
            while i < len(starts) and starts[i] <= e:
                s = starts[i]
                rec = seg[s]
                n = rec[0] - s + 1
                before = rec[1]
                rec[1] = max(0, before + delta)
                if before == 0 and rec[1] > 0:
                    self.pinned_blocks += n
                elif before > 0 and rec[1] == 0:
                    self.pinned_blocks -= n
                if restamp:
                    rec[2] = stamp
                i += 1
            self._coalesce(a, e)

    # ------------------------------------------------------------------ public mutation
    def pin(self, pieces: Sequence[Piece]) -> None:
        """Reference cached blocks (they must be cached) so they cannot be evicted."""
        self._ref(pieces, +1, False)

    def unpin(self, pieces: Sequence[Piece], restamp: bool = True) -> None:
        """Drop one reference; blocks reaching zero become evictable, most recent last.

        ``restamp=False`` undoes a :meth:`pin` without refreshing the LRU order.
        """
        self._ref(pieces, -1, restamp)

    def touch(self, pieces: Sequence[Piece]) -> None:
        """Mark cached blocks as just used (LRU) without pinning them."""
        if self.capacity_blocks is None:
            return
        self._ref(pieces, 0, True)

    def reserve(self, n_blocks: int) -> bool:
        """Allocate ``n_blocks`` uncached blocks (evicting unpinned ones); False if they don't fit."""
        if n_blocks > self.free_blocks():
            return False
        self.reserved_blocks += n_blocks
        self._make_room(0)
        return True

    def unreserve(self, n_blocks: int) -> None:
        self.reserved_blocks = max(0, self.reserved_blocks - n_blocks)

    def insert(self, pieces: Sequence[Piece], pin: bool = False) -> int:
        """Add blocks (those already cached are kept, and pinned too if ``pin``).

        Returns the number of newly cached blocks. If the tier is full of pinned blocks, the
        blocks that do not fit are not cached (documented fallback; cannot happen when the caller
        reserved them first, as the engine does).
        """
        new_total = 0
        stored: list[Piece] = []
        starts, seg = self._starts, self._seg
        self._clock += 1
        stamp = self._clock
        full = False
        for a, e in pieces:
            if full:
                break
            x = a
            while x <= e:
                s = self._find(x)
                if s is not None:
                    y = min(seg[s][0], e)
                    if pin:
                        self._ref([(x, y)], +1, False)
                    x = y + 1
                    continue
                i = bisect_right(starts, x)
                nxt = starts[i] if i < len(starts) else None
                g = e if nxt is None or nxt > e else nxt - 1
                n = g - x + 1
                if not self._make_room(n):
                    # full of pinned/reserved blocks: cache what fits, then stop (so this call
                    # never evicts the blocks it has just inserted)
                    full = True
                    room = (self.capacity_blocks or 0) - self.cached_blocks - self.reserved_blocks
                    n = max(0, min(n, room))
                    if n == 0:
                        break
                    g = x + n - 1
                seg[x] = [g, 1 if pin else 0, stamp]
                insort(starts, x)
                self.cached_blocks += n
                if pin:
                    self.pinned_blocks += n
                new_total += n
                stored.append((x, g))
                x = g + 1
                if full:
                    break
            self._coalesce(a, e)
        if stored and self._events is not None:
            self._events.blocks_stored(stored)
        return new_total

    def _make_room(self, n_new: int) -> bool:
        """Evict unpinned LRU blocks until ``cached + reserved + n_new <= capacity``."""
        cap = self.capacity_blocks
        if cap is None:
            return True
        need = self.cached_blocks + self.reserved_blocks + n_new - cap
        if need <= 0:
            return True
        removed: list[Piece] = []
        seg = self._seg
        while need > 0:
            victim = -1
            best: tuple[int, int] | None = None
            for s, rec in seg.items():
                if rec[1] == 0:
                    key = (rec[2], -s)
                    if best is None or key < best:
                        best, victim = key, s
            if best is None:
                break
            rec = seg[victim]
            length = rec[0] - victim + 1
            k = min(need, length)
            removed.append((rec[0] - k + 1, rec[0]))
            if k == length:
                del seg[victim]
                self._starts.pop(bisect_right(self._starts, victim) - 1)
            else:
                rec[0] -= k
            self.cached_blocks -= k
            self.evicted_blocks += k
            need -= k
        if removed and self._events is not None:
            self._events.blocks_removed(removed)
        return need <= 0

    def clear(self) -> None:
        """Drop every unpinned block (vLLM ``AllBlocksCleared`` on reset)."""
        self._make_room(self.capacity_blocks or 0)
