"""Per-endpoint sets of GPU-resident block hashes, maintained from KV events."""

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
    the local tier the policies reason about. :meth:`resync` forgets an endpoint's blocks after lost
    events; the set then refills from later ``BlockStored`` events (hits read low meanwhile, never
    high: a lost ``BlockRemoved`` cannot leave a phantom block behind).
    """

    def __init__(self) -> None:
        self._blocks: dict[str, set[int]] = {}

    def blocks(self, address: str) -> set[int] | None:
        return self._blocks.get(address)

    def apply(self, address: str, events: Iterable[KvEvent]) -> None:
        blocks = self._blocks.setdefault(address, set())
        for event in events:
            if isinstance(event, BlockStored):
                if is_local_tier(event.medium):
                    blocks.update(event.block_hashes)
            elif isinstance(event, BlockRemoved):
                if is_local_tier(event.medium):
                    blocks.difference_update(event.block_hashes)
            elif isinstance(event, AllBlocksCleared):
                blocks.clear()

    def resync(self, address: str) -> None:
        self._blocks[address] = set()

    def remove(self, address: str) -> None:
        self._blocks.pop(address, None)

    def size(self, address: str) -> int:
        return len(self._blocks.get(address, ()))
