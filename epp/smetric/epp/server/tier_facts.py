"""The picker's two-tier facts: g[i] for every policy in a pool with a global tier; nodes and session footprint for
``smetric-tiered``.

g is built whenever a global tier is configured, whatever the policy: the flow gate's TTFT estimate and the dispatch
ledger's charge are the framework's and read it for a baseline too (docs/overload.md, 8e); a policy's own rule reads it
only when its registry entry says ``uses_tier_view``. Nodes and footprint only for a policy that reads them
(``uses_node_facts``); a pool without a tier and such a policy pays nothing.

**g (global-tier hit)** is :class:`smetric.router.tier_model.GlobalTierModel`, the one tier model the
simulator uses too (its adapter there is ``smetric.sim.tier_view``); this module adapts the picker's inputs:

1. *KV events* (precise index): blocks the engines report on a medium other than the GPU are handed to the
   model by the block store (:attr:`smetric.epp.kvevents.store.BlockStore.global_sink`). vLLM publishes
   ``BlockStored``/``BlockRemoved`` with a ``medium`` field (``vllm/distributed/kv_events.py``:
   ``MEDIUM_GPU = "GPU"``, ``MEDIUM_CPU = "CPU"``); ``LMCacheConnectorV1`` forwards LMCache's store events
   only, never a removal (the model's docstring has the lines), so the known set is bounded by the tier's
   capacity. Any non-GPU medium counts as the global tier.
2. *Write estimate* otherwise: every routed prompt is recorded as written (LMCache writes through what it
   computes), its whole LMCache chunks only (``chunk_tokens``). Bound: ``tiered.globalCapacityTokens`` (a
   fixed total), else the pool's ``globalSegmentTokens`` x the endpoints discovered at that dispatch (every
   engine pod contributes one Mooncake segment, so scaling the pool needs no new config), else unbounded
   (within a memory budget of ``max_keys`` keys).

**Nodes** come from discovery (``EndpointInfo.node``: the pod's ``spec.nodeName``, or ``node:``
in a standalone endpoints file). **Footprint**: a :class:`~smetric.policy.footprint.FootprintTracker`
charged at dispatch with the tokens the request writes into its target's local tier.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from smetric.core.views import EndpointSnapshot
from smetric.epp.contracts import EndpointInfo, PoolIndex, PromptKey
from smetric.epp.kvevents.store import BlockStore
from smetric.policy.base import PolicyParams
from smetric.policy.footprint import FootprintTracker
from smetric.policy.smetric_tiered import with_tier_facts
from smetric.policy.tiered_params import SMetricTieredParams
from smetric.router.tier_model import DEFAULT_MAX_KEYS, GlobalTierModel


class GlobalTierIndex:
    """The picker's adapter of :class:`GlobalTierModel`: prompt keys in, the pool's size as the bound."""

    __slots__ = ("_capacity_keys", "_max_keys", "_segment_tokens", "model", "tokens_per_key")

    def __init__(
        self,
        tokens_per_key: int,
        *,
        store: BlockStore | None = None,
        capacity_tokens: int | None = None,
        segment_tokens: int | None = None,
        max_keys: int = DEFAULT_MAX_KEYS,
        chunk_tokens: int | None = None,
    ) -> None:
        if tokens_per_key <= 0 or max_keys <= 0:
            raise ValueError("tokens_per_key and max_keys must be positive")
        self.tokens_per_key = tokens_per_key
        keys = max_keys if capacity_tokens is None else max(1, capacity_tokens // tokens_per_key)
        self._capacity_keys = min(keys, max_keys)
        # per engine pod, when no fixed total is given: the capacity follows the pool's size
        self._segment_tokens = segment_tokens if capacity_tokens is None else None
        self._max_keys = max_keys
        self.model = GlobalTierModel(tokens_per_key, self._capacity_keys, max_keys, chunk_tokens)
        if store is not None:
            store.global_sink = self.model

    @property
    def from_events(self) -> bool:
        return self.model.from_events

    def global_hit(self, key: PromptKey) -> int:
        return self.model.global_hit(key.block_keys, key.prompt_tokens)

    def capacity_keys(self, n_endpoints: int = 1) -> int:
        """The known set's bound in keys with ``n_endpoints`` engines in the pool."""
        if self._segment_tokens is None:
            return self._capacity_keys
        keys = max(1, self._segment_tokens * max(1, n_endpoints) // self.tokens_per_key)
        return min(keys, self._max_keys)

    def on_routed(self, key: PromptKey, n_endpoints: int = 1) -> None:
        """The prompt was dispatched (``n_endpoints`` engines in the pool)."""
        self.model.routed(key.block_keys, key.prompt_tokens, self.capacity_keys(n_endpoints))

    def size(self) -> int:
        return self.model.size()


class TierFacts:
    """Fills the snapshots' two-tier fields and learns from each dispatch."""

    __slots__ = ("_clock", "_nodes", "_nodes_of", "footprint", "global_tier", "index", "node_facts")

    def __init__(
        self,
        index: GlobalTierIndex,
        footprint_window_s: float,
        clock: Callable[[], float],
        *,
        node_facts: bool = True,
        global_tier: bool = True,
    ) -> None:
        self.index = index
        # the pool has a global tier (globalFetchSPerToken): without one nothing is written
        # through, so g is 0 and the index records nothing (and spends no memory)
        self.global_tier = global_tier
        self.node_facts = node_facts  # node and footprint too (smetric-tiered); smetric reads only g
        self.footprint = FootprintTracker(footprint_window_s)
        self._clock = clock
        self._nodes_of: Sequence[EndpointInfo] | None = None  # the endpoint list _nodes was built from
        self._nodes: dict[str, str] = {}

    def facts_of(self, endpoints: Sequence[EndpointInfo]) -> Callable[[str], tuple[str, float]]:
        """``address -> (node, session_kv_tokens)`` for one decision (the router core's ``tier``)."""
        if endpoints is not self._nodes_of:  # discovery hands out a new tuple on every change
            self._nodes = {ep.address: ep.node for ep in endpoints}
            self._nodes_of = endpoints
        node_of, fp, now = self._nodes.get, self.footprint.tokens, self._clock()

        def facts(address: str) -> tuple[str, float]:
            return node_of(address, ""), fp(address, now)

        return facts

    def enrich(
        self, snaps: list[EndpointSnapshot], endpoints: Sequence[EndpointInfo], key: PromptKey
    ) -> list[EndpointSnapshot]:
        g = self.index.global_hit(key)
        now, fp = self._clock(), self.footprint.tokens
        return [
            with_tier_facts(s, g, ep.node, fp(s.name, now)) for s, ep in zip(snaps, endpoints, strict=True)
        ]

    def global_hit(self, key: PromptKey) -> int:
        """g for ``key``; 0 in a pool without a global tier (the write estimate would otherwise make
        the ledger charge fetches for tokens that are recomputed)."""
        return self.index.global_hit(key) if self.global_tier else 0

    def dispatched(self, key: PromptKey, address: str, written_tokens: int, n_endpoints: int = 1) -> None:
        if self.global_tier:
            self.index.on_routed(key, n_endpoints)
        if not self.node_facts:
            return
        self.footprint.add(address, float(written_tokens), self._clock())

    def forget(self, address: str) -> None:
        self.footprint.forget(address)


def build_tier_facts(
    index: PoolIndex, params: PolicyParams, clock: Callable[[], float], *, node_facts: bool = True
) -> TierFacts:
    """Tier facts over the picker's prefix index: its key granularity, and its KV-event block
    store when it has one (the precise index)."""
    tiered = params.get(SMetricTieredParams).tiered
    gi = GlobalTierIndex(
        index.tokens_per_key,
        store=index.store,
        capacity_tokens=tiered.global_capacity_tokens,
        segment_tokens=params.global_segment_tokens,  # per engine pod (rendered by the operator)
        chunk_tokens=params.global_chunk_tokens,  # LMCache chunk_size (rendered by the operator)
    )
    return TierFacts(
        gi,
        tiered.footprint_window_s,
        clock,
        node_facts=node_facts,
        global_tier=params.global_fetch_s_per_token is not None,
    )
