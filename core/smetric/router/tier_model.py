"""What a deployed router can know of the global KV tier's content: one model for the picker and the simulator.

g (the global-tier hit of a prompt) is the longest prefix of the prompt's block keys held in a *known set*,
fed by one of two sources, the first that has data wins:

1. **Store events** (:meth:`GlobalTierModel.stored`): the blocks a non-GPU ``BlockStored`` event reports. With
   LMCache there are stores and no removals: LMCache 0.5.6's ``LMCacheConnectorV1Impl.get_kv_events`` yields
   ``CacheStoreEvent`` only (``lmcache/integration/vllm/vllm_v1_adapter.py:1942-1945``; made per stored chunk,
   medium ``"cpu"``, ``lmcache/v1/cache_engine.py:534-544``, and only with ``enable_kv_events``, default false,
   ``lmcache/v1/config.py:582-586``), and vLLM's ``LMCacheConnectorV1.get_kv_connector_kv_cache_events`` turns
   each into a ``BlockStored`` and nothing else (``vllm/distributed/kv_transfer/kv_connector/v1/
   lmcache_connector.py:204-226`` of the stored main-branch copy, commit 0047fb9; the method is the same in the
   pinned v0.32.0 by name, lines not diffed). So the known set cannot follow the store's evictions: it is
   bounded by the tier's capacity instead, least recently stored or used first, as the store's own LRU.
2. **Write estimate** (:meth:`GlobalTierModel.routed` before any event arrived): LMCache writes through what an
   engine computes, so every routed prompt is recorded as written, bounded the same way. LMCache 0.5.6 stores
   whole chunks only (``save_unfull_chunk`` defaults to false, ``lmcache/v1/config.py:385-389``; the adapter then
   saves ``input_len // chunk_size * chunk_size`` tokens, ``lmcache/integration/vllm/vllm_v1_adapter.py:351-354``),
   so with ``chunk_tokens`` set only the keys inside the prompt's whole chunks are recorded.

A dispatch also counts as a use of the prefix it hits (the engine's lookup refreshes it in the store's LRU), so
:meth:`~GlobalTierModel.routed` refreshes the held prefix when events are the source.

Keys are opaque integers standing for their whole prefix (chained block hashes in the picker, chained block ids
in the simulator), so the known set is prefix-closed and a hit is found by binary search. The LRU inserts a chain
tail first (its prefix ends up the most recent) and evicts the least recent first, as the picker's prefix index
(``smetric.epp.index.approximate``). The simulator's exact-content oracle (``--tier-hits exact``) is not this
model: it reads the simulated tier itself.

Adapters: ``smetric.epp.server.tier_facts`` (PromptKey block hashes, KV events from the block store) and
``smetric.sim.tier_view`` (block ids, store events of the simulated tier). Both feed this class and nothing else
decides g; ``tests/unit/sim/test_tier_model_adapters.py`` feeds both the same sequence and requires equal g.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from itertools import repeat

DEFAULT_MAX_KEYS = 2_000_000  # the picker's memory budget of the known set (~200 MB of LRU entries)


def _drain(it: Iterable[object]) -> None:
    deque(it, maxlen=0)


class KeyLru:
    """An LRU of prefix-chained keys (each key stands for its whole prefix): the global tier's known
    set here and each endpoint's blocks in the picker's prefix index (``smetric.epp.index.approximate``)."""

    __slots__ = ("keys",)

    def __init__(self) -> None:
        self.keys: OrderedDict[int, None] = OrderedDict()

    def insert_chain(self, chain: Sequence[int], capacity: int | None) -> None:
        """Make ``chain`` the most recent, tail first, then evict the least recent down to ``capacity``
        (``None``: unbounded). C-level maps, no Python loop per key."""
        keys = self.keys
        tail_first = chain[::-1]
        keys.update(zip(tail_first, repeat(None)))
        _drain(map(keys.move_to_end, tail_first))
        if capacity is not None:
            excess = len(keys) - capacity
            if excess > 0:
                _drain(map(keys.popitem, repeat(False, excess)))

    def prefix_len(self, chain: Sequence[int]) -> int:
        """Leading keys of ``chain`` held (binary search: the set is prefix-closed)."""
        keys = self.keys
        lo, hi = 0, len(chain)
        while lo < hi:
            mid = (lo + hi) // 2
            if chain[mid] in keys:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def __len__(self) -> int:
        return len(self.keys)


class GlobalTierModel:
    """The known set of the global tier and g (see the module docstring).

    ``tokens_per_key``: tokens one key stands for. ``capacity_keys``: the tier's size in keys (``None``: a
    fully provisioned tier); a call may pass its own (the picker's per-pod segments follow the pool's size).
    ``max_keys``: memory budget (``None``: none, the simulator's full tier). ``chunk_tokens``: the store's
    chunk (LMCache ``chunk_size``); ``None`` records whole prompts."""

    __slots__ = ("_capacity", "_chunk", "_lru", "_max_keys", "events", "tokens_per_key")

    def __init__(
        self,
        tokens_per_key: int,
        capacity_keys: int | None = None,
        max_keys: int | None = DEFAULT_MAX_KEYS,
        chunk_tokens: int | None = None,
    ) -> None:
        if tokens_per_key <= 0:
            raise ValueError(f"tokens_per_key must be positive, got {tokens_per_key}")
        if any(x is not None and x <= 0 for x in (capacity_keys, max_keys, chunk_tokens)):
            raise ValueError("capacity_keys, max_keys and chunk_tokens must be positive or None")
        self.tokens_per_key = tokens_per_key
        self._chunk = chunk_tokens
        self._capacity = capacity_keys
        self._max_keys = max_keys
        self._lru = KeyLru()
        self.events = 0  # store events seen: once any arrived, they are the source

    @property
    def from_events(self) -> bool:
        return self.events > 0

    def bound(self, capacity_keys: int | None = None) -> int | None:
        """The known set's bound in keys: the tier's capacity (``capacity_keys`` when given) within the budget."""
        cap = self._capacity if capacity_keys is None else capacity_keys
        if cap is None:
            return self._max_keys
        return cap if self._max_keys is None else min(cap, self._max_keys)

    def global_hit(self, chain: Sequence[int], prompt_tokens: int) -> int:
        """g in tokens: the known prefix of ``chain``, at most the prompt."""
        if not chain:
            return 0
        return min(max(0, prompt_tokens), self._lru.prefix_len(chain) * self.tokens_per_key)

    def stored(self, chain: Sequence[int], capacity_keys: int | None = None) -> None:
        """A store event (``BlockStored`` on a non-GPU medium): these keys are in the tier now. The first event
        drops what the write estimate recorded: from then on events are the source."""
        if self.events == 0:
            self._lru.keys.clear()
        self.events += 1
        if chain:
            self._lru.insert_chain(chain, self.bound(capacity_keys))

    def removed(self, keys: Iterable[int]) -> None:
        """A removal event (a source that publishes them, e.g. vLLM's native ``OffloadingConnector``; LMCache's
        ``LMCacheConnectorV1`` does not)."""
        pop = self._lru.keys.pop
        for k in keys:
            pop(k, None)

    def written_keys(self, chain: Sequence[int], prompt_tokens: int) -> int:
        """How many leading keys of a routed prompt the store writes: its whole chunks (all keys without a chunk)."""
        if self._chunk is None:
            return len(chain)
        tokens = max(0, prompt_tokens) // self._chunk * self._chunk
        return min(len(chain), tokens // self.tokens_per_key)

    def routed(self, chain: Sequence[int], prompt_tokens: int, capacity_keys: int | None = None) -> None:
        """A prompt was dispatched: without events, the write estimate records it as written (its whole
        chunks); with events, the prefix it hits counts as used (the store's LRU refreshes it on lookup)."""
        if not chain:
            return
        if self.events > 0:
            held = self._lru.prefix_len(chain)
            if held:
                self._lru.insert_chain(chain[:held], self.bound(capacity_keys))
            return
        n = self.written_keys(chain, prompt_tokens)
        if n:
            self._lru.insert_chain(chain[:n], self.bound(capacity_keys))

    def size(self) -> int:
        return len(self._lru)
