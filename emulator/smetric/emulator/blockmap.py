"""Adapter between vLLM block hashes and the engine's chained block ids.

The engine's :class:`~smetric.engine.prefix_cache.BlockCache` keeps cached ids as runs of
*consecutive* integers (the trace's encoding: a session's blocks are numbered in a row), which
keeps its work per request proportional to runs, not blocks. Real block hashes are random 64-bit
numbers, so this map interns each hash as a local id: a block continuing a chain whose parent has
local id ``p`` gets ``p + 1`` when that id is free (so a session's chain stays one run), otherwise
a fresh base id. Because ids are 1:1 with chained hashes, an id still stands for its whole prefix.

The map remembers, per local id, what a ``BlockStored`` event needs (hash, parent hash, token ids).
An entry lives while the block is cached (by any instance sharing the map) or referenced by a
request in flight, so memory stays proportional to the caches plus the running batches. With a
global tier the instances share one map (the tier matches ids, so an id must mean the same block
on every instance) and ``keep_forever`` keeps every entry: the tier's content is not observable,
so an entry it may still hold is never dropped (memory grows with the distinct blocks seen).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from smetric.engine.prefix_cache import Piece

_STRIDE = 1 << 24  # room for a chain of 16M blocks before it has to jump to a fresh base


@dataclass(frozen=True, slots=True)
class BlockInfo:
    block_hash: int
    parent_hash: int | None
    token_ids: tuple[int, ...]


class BlockMap:
    """Interning table: 64-bit block hash <-> local chained id, with per-id event payloads."""

    def __init__(self, keep_forever: bool = False) -> None:
        self._local: dict[int, int] = {}  # block hash -> local id
        self._info: dict[int, BlockInfo] = {}  # local id -> payload
        self._refs: dict[int, int] = {}  # local id -> requests in flight holding it
        self._cached: dict[int, int] = {}  # local id -> instances caching it
        self._next_base = 0
        self.keep_forever = keep_forever

    def __len__(self) -> int:
        return len(self._info)

    def intern(self, hashes: Sequence[int], token_ids: Sequence[int], block_size: int) -> list[int]:
        """Local ids of a request's full blocks (hash ``i`` covers ``token_ids[i*bs:(i+1)*bs]``);
        each id is referenced once until :meth:`release`."""
        out: list[int] = []
        parent_hash: int | None = None
        parent_id: int | None = None
        for i, h in enumerate(hashes):
            lid = self._local.get(h)
            if lid is None:
                if parent_id is not None and parent_id + 1 not in self._info:
                    lid = parent_id + 1
                else:
                    lid = self._next_base
                    self._next_base += _STRIDE
                self._local[h] = lid
                tokens = tuple(token_ids[i * block_size : (i + 1) * block_size])
                self._info[lid] = BlockInfo(h, parent_hash, tokens)
            self._refs[lid] = self._refs.get(lid, 0) + 1
            out.append(lid)
            parent_hash, parent_id = h, lid
        return out

    def release(self, ids: Iterable[int]) -> None:
        """Drop one request reference per id; entries neither cached nor referenced are freed."""
        for lid in ids:
            n = self._refs.get(lid, 0) - 1
            if n > 0:
                self._refs[lid] = n
                continue
            self._refs.pop(lid, None)
            if lid not in self._cached:
                self._forget(lid)

    def _forget(self, lid: int) -> None:
        if self.keep_forever:
            return
        info = self._info.pop(lid, None)
        if info is not None:
            self._local.pop(info.block_hash, None)

    def info(self, lid: int) -> BlockInfo:
        return self._info[lid]

    def stored(self, pieces: Sequence[Piece]) -> list[list[BlockInfo]]:
        """Mark pieces cached by one more instance; returns each piece's chain of payloads (one ``BlockStored`` each)."""
        chains: list[list[BlockInfo]] = []
        for a, b in pieces:
            chain = []
            for lid in range(a, b + 1):
                self._cached[lid] = self._cached.get(lid, 0) + 1
                chain.append(self._info[lid])
            chains.append(chain)
        return chains

    def removed(self, pieces: Sequence[Piece]) -> list[int]:
        """Mark pieces evicted by one instance; returns their block hashes (one ``BlockRemoved``)."""
        hashes: list[int] = []
        for a, b in pieces:
            for lid in range(a, b + 1):
                n = self._cached.pop(lid, 0) - 1
                if n > 0:
                    self._cached[lid] = n
                info = self._info.get(lid)
                if info is not None:
                    hashes.append(info.block_hash)
                if n <= 0 and lid not in self._refs:
                    self._forget(lid)
        return hashes


def to_pieces(ids: Sequence[int]) -> tuple[Piece, ...]:
    """Consecutive local ids as inclusive ``(first, last)`` runs."""
    out: list[Piece] = []
    for lid in ids:
        if out and out[-1][1] + 1 == lid:
            out[-1] = (out[-1][0], lid)
        else:
            out.append((lid, lid))
    return tuple(out)
