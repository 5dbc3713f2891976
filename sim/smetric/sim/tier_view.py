"""The two-tier facts the simulated router gives ``smetric-tiered``.

Only built for a policy that reads them (its registry entry's ``uses_tier_view``); other policies' runs are unchanged
and pay nothing. Per decision it sets, on each endpoint snapshot:

* ``global_hit_tokens`` (g[i]): the prompt prefix the simulated global tier holds now (one
  lookup per request: the tier is cluster-wide, so g is the same for every instance);
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
from smetric.engine import EngineRequest, Instance
from smetric.policy.footprint import FootprintTracker
from smetric.policy.smetric_tiered import with_tier_facts


class TierView:
    __slots__ = ("_block_tokens", "_footprint", "_nodes", "_tier")

    def __init__(self, instances: Sequence[Instance], block_tokens: int, footprint_window_s: float) -> None:
        self._tier = next((inst.global_tier for inst in instances if inst.global_tier is not None), None)
        self._nodes = [f"node-{inst.config.node}" for inst in instances]
        self._block_tokens = block_tokens
        self._footprint = FootprintTracker(footprint_window_s)

    def enrich(
        self, snaps: list[EndpointSnapshot], request: EngineRequest, now_s: float
    ) -> list[EndpointSnapshot]:
        fp, nodes = self._footprint.tokens, self._nodes
        if self._tier is None:  # no global tier: g stays what the router core estimated (0)
            return [
                with_tier_facts(s, s.global_hit_tokens, nodes[i], fp(s.name, now_s))
                for i, s in enumerate(snaps)
            ]
        g = min(request.prompt_tokens, self._tier.match(request.prompt_pieces) * self._block_tokens)
        return [with_tier_facts(s, g, nodes[i], fp(s.name, now_s)) for i, s in enumerate(snaps)]

    def dispatched(self, snap: EndpointSnapshot, view: RequestView, now_s: float) -> None:
        self._footprint.add(
            snap.name, view.prompt_tokens - min(view.prompt_tokens, snap.local_hit_tokens), now_s
        )
