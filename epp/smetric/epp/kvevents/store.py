"""Per-endpoint sets of GPU-resident block hashes, maintained from KV events, plus the blocks
reported on any other medium (the offload / global tier, read by ``smetric-tiered``)."""

from __future__ import annotations

from collections.abc import Iterable

from smetric.epp.kvevents.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEvent,
    is_local_tier,
)


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
    """

    def __init__(self, max_global_blocks: int = 8_000_000) -> None:
        self._blocks: dict[str, set[int]] = {}
        self._global: set[int] = set()
        self._max_global = max_global_blocks
        self.global_events = 0  # BlockStored events seen on a non-GPU medium

    def global_blocks(self) -> set[int]:
        return self._global

    def blocks(self, address: str) -> set[int] | None:
        return self._blocks.get(address)

    def apply(self, address: str, events: Iterable[KvEvent]) -> None:
        blocks = self._blocks.setdefault(address, set())
        for event in events:
            if isinstance(event, BlockStored):
                if is_local_tier(event.medium):
                    blocks.update(event.block_hashes)
                else:
                    self.global_events += 1
                    if len(self._global) + len(event.block_hashes) > self._max_global:
                        self._global.clear()
                    self._global.update(event.block_hashes)
            elif isinstance(event, BlockRemoved):
                if is_local_tier(event.medium):
                    blocks.difference_update(event.block_hashes)
                else:
                    self._global.difference_update(event.block_hashes)
            elif isinstance(event, AllBlocksCleared):
                blocks.clear()

    def resync(self, address: str) -> None:
        self._blocks[address] = set()

    def remove(self, address: str) -> None:
        self._blocks.pop(address, None)

    def size(self, address: str) -> int:
        return len(self._blocks.get(address, ()))
