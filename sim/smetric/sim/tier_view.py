"""The two-tier facts the simulated router gives ``smetric`` and ``smetric-tiered``.

Only built for a policy that reads them (its registry entry's ``uses_tier_view``); other policies' runs are unchanged
and pay nothing. Per decision it sets, on each endpoint snapshot:

* ``global_hit_tokens`` (g[i]): the prompt prefix the simulated global tier holds now (one
  lookup per request: the tier is cluster-wide, so g is the same for every instance) -- a picker
  fed the tier's KV events (``SimConfig.tier_hits = "events"``). With ``"estimate"``, the
  picker's write estimate without events instead (``smetric.epp.server.tier_facts``): an LRU of
  the prompts routed so far, recorded at dispatch (not the answers, not when computed), as large
  as the tier (a full tier: unbounded);
* ``node``: the instance's node (``EngineConfig.node``: 8 GPUs per node, as the paper's
  servers, :func:`smetric.engine.global_tier.instances_per_node`);
* ``session_kv_tokens``: the footprint tracker (:mod:`smetric.policy.footprint`), charged at
  dispatch with the tokens the request writes into its target's local tier (``L - c``).

The link backlog is not read from the simulated links (the picker cannot see them): the policy
derives it from the ledger's queued fetch seconds per node (``queued_fetch_s``).
"""

from __future__ import annotations

from collections.abc import Sequence

from smetric.core.views import EndpointSnapshot, RequestView
from smetric.engine import EngineRequest, Instance, Piece
from smetric.engine.prefix_cache import BlockCache
from smetric.policy.footprint import FootprintTracker
from smetric.policy.smetric_tiered import with_tier_facts


class TierView:
    __slots__ = ("_block_tokens", "_estimate", "_footprint", "_node_facts", "_nodes", "_tier")

    def __init__(
        self,
        instances: Sequence[Instance],
        block_tokens: int,
        footprint_window_s: float,
        *,
        estimate: bool = False,
        node_facts: bool = True,
    ) -> None:
        self._tier = next((inst.global_tier for inst in instances if inst.global_tier is not None), None)
        self._nodes = [f"node-{inst.config.node}" for inst in instances]
        self._block_tokens = block_tokens
        self._footprint = FootprintTracker(footprint_window_s)
        # node and footprint too (smetric-tiered; PolicyEntry.uses_node_facts); smetric reads only g
        self._node_facts = node_facts
        # the picker's write estimate (tier_hits = "estimate"): what it routed, the tier's size
        self._estimate = (
            BlockCache(self._tier.capacity_blocks) if estimate and self._tier is not None else None
        )

    def enrich(
        self, snaps: list[EndpointSnapshot], request: EngineRequest, now_s: float
    ) -> list[EndpointSnapshot]:
        fp, nodes = self._footprint.tokens, self._nodes
        if self._tier is None:  # no global tier: g stays what the router core estimated (0)
            if not self._node_facts:
                return snaps
            return [
                with_tier_facts(s, s.global_hit_tokens, nodes[i], fp(s.name, now_s))
                for i, s in enumerate(snaps)
            ]
        seen = self._tier if self._estimate is None else self._estimate
        g = min(request.prompt_tokens, seen.match(request.prompt_pieces) * self._block_tokens)
        if not self._node_facts:
            return [with_tier_facts(s, g, s.node, s.session_kv_tokens) for s in snaps]
        return [with_tier_facts(s, g, nodes[i], fp(s.name, now_s)) for i, s in enumerate(snaps)]

    def dispatched(
        self, snap: EndpointSnapshot, view: RequestView, now_s: float, prompt: Sequence[Piece] = ()
    ) -> None:
        if self._node_facts:
            self._footprint.add(
                snap.name, view.prompt_tokens - min(view.prompt_tokens, snap.local_hit_tokens), now_s
            )
        self.routed(prompt)

    def routed(self, prompt: Sequence[Piece]) -> None:
        """The write estimate records a routed prompt (LMCache writes what it computes through)."""
        if self._estimate is not None and prompt:
            self._estimate.insert(prompt)
            self._estimate.touch(prompt)
