"""Per-endpoint sets of GPU-resident block hashes, maintained from KV events, plus the blocks
reported on any other medium (the offload / global tier, read by ``smetric-tiered``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, KeysView, Sequence
from typing import Protocol

from smetric.epp.kvevents.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEvent,
    is_local_tier,
)

_U64 = (1 << 64) - 1


class GlobalSink(Protocol):
    """Receives the non-GPU (global-tier) block events (``smetric.router.tier_model.GlobalTierModel``)."""

    def stored(self, chain: Sequence[int], capacity_keys: int | None = None) -> None: ...

    def removed(self, keys: Iterable[int]) -> None: ...


class BlockStore:
    """``address -> set of 64-bit block hashes`` on that endpoint's GPU tier.

    Only events whose medium is the GPU (or unset) change the sets: CPU/disk offload tiers are not
    the local tier the policies reason about. Events on any other medium (vLLM ``MEDIUM_CPU``
    ``"CPU"`` from its offloading connector; what ``LMCacheConnectorV1`` forwards from LMCache)
    go to one cluster-wide set, :meth:`global_blocks`: the blocks a shared store (Mooncake via
    LMCache) can supply to any endpoint. A per-instance CPU tier reported this way is counted as
    reachable from every endpoint (an over-estimate, documented in docs/policies.md). That set is
    bounded by ``max_global_blocks``; on overflow it is cleared and refills from later events
    (global hits then read low, never high). :meth:`resync` forgets an endpoint's blocks after lost
    events; the set then refills from later ``BlockStored`` events (hits read low meanwhile, never
    high: a lost ``BlockRemoved`` cannot leave a phantom block behind).

    Per-endpoint cap (a flood of ``BlockStored`` would otherwise grow one set without bound): an
    endpoint holds at most ``capacity(address)`` blocks -- the engine's ``num_gpu_blocks`` from its
    scraped ``vllm:cache_config_info``, times ``slack`` (the engine cannot hold more, so more means
    lost ``BlockRemoved`` events) -- or ``default_max_blocks`` before the engine was scraped. Past
    the cap the least recently stored blocks go first (a dict in store order is the LRU).
    """

    def __init__(
        self,
        max_global_blocks: int = 8_000_000,
        default_max_blocks: int = 2_000_000,
        capacity: Callable[[str], int | None] | None = None,
        slack: float = 1.25,
    ) -> None:
        self._blocks: dict[str, dict[int, None]] = {}
        self._default_max = default_max_blocks
        self._capacity = capacity
        self._slack = slack
        self.evicted = 0  # blocks dropped by the cap
        self._global: set[int] = set()
        self._max_global = max_global_blocks
        self.global_events = 0  # BlockStored events seen on a non-GPU medium
        # the picker's tier model, fed every non-GPU event (set by smetric.epp.server.tier_facts)
        self.global_sink: GlobalSink | None = None

    def global_blocks(self) -> set[int]:
        return self._global

    def set_capacity_source(self, capacity: Callable[[str], int | None]) -> None:
        self._capacity = capacity

    def max_blocks(self, address: str) -> int:
        cap = self._capacity(address) if self._capacity is not None else None
        return int(cap * self._slack) + 1 if cap else self._default_max

    def blocks(self, address: str) -> KeysView[int] | None:
        b = self._blocks.get(address)
        return b.keys() if b is not None else None

    def apply(self, address: str, events: Iterable[KvEvent]) -> None:
        blocks = self._blocks.setdefault(address, {})
        limit = self.max_blocks(address)
        for event in events:
            if isinstance(event, BlockStored):
                if is_local_tier(event.medium):
                    for h in event.block_hashes:
                        blocks.pop(h, None)  # re-stored: most recent again
                        blocks[h] = None
                    over = len(blocks) - limit
                    if over > 0:
                        self._evict(blocks, over)
                else:
                    self.global_events += 1
                    if len(self._global) + len(event.block_hashes) > self._max_global:
                        self._global.clear()
                    self._global.update(event.block_hashes)
                    if self.global_sink is not None:
                        self.global_sink.stored(event.block_hashes)
            elif isinstance(event, BlockRemoved):
                if is_local_tier(event.medium):
                    for h in event.block_hashes:
                        blocks.pop(h, None)
                else:
                    self._global.difference_update(event.block_hashes)
                    if self.global_sink is not None:
                        self.global_sink.removed(event.block_hashes)
            elif isinstance(event, AllBlocksCleared):
                blocks.clear()

    def _evict(self, blocks: dict[int, None], n: int) -> None:
        it = iter(blocks)
        old = [next(it) for _ in range(n)]
        for h in old:
            del blocks[h]
        self.evicted += n

    def resync(self, address: str) -> None:
        self._blocks[address] = {}

    def remove(self, address: str) -> None:
        self._blocks.pop(address, None)

    def size(self, address: str) -> int:
        return len(self._blocks.get(address, ()))

    def export_state(self) -> dict[str, list[int]]:
        """Per endpoint, its GPU block hashes least recently stored first (a restart's warm start).
        Hashes are written as unsigned 64-bit integers (what vLLM publishes)."""
        return {address: [h & _U64 for h in blocks] for address, blocks in self._blocks.items()}

    def import_state(self, state: dict[str, list[int]]) -> None:
        """Replace the per-endpoint sets with ``state`` (as :meth:`export_state` wrote it), each
        trimmed to the endpoint's cap (most recent kept)."""
        self._blocks = {}
        for address, hashes in state.items():
            keep = hashes[-self.max_blocks(address) :]
            self._blocks[address] = dict.fromkeys(keep)
