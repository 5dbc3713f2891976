"""Parameters of ``smetric-tiered`` (one switch per mechanism, for the ablation rows).

Kept apart from :mod:`smetric.policy.base` so :class:`~smetric.policy.base.PolicyParams` holds
them as one field (``PolicyParams.tiered``) and the YAML/CRD key is one object::

    tiered:
      globalAware: true            # mechanism 1: h[i] = max(c[i], g[i]) + fetch and link backlog
      costAwareMigration: true     # mechanism 2: migrate only when the TTFT gain beats the move
      nodeLocal: true              # mechanism 2: prefer targets on the session's node
      footprint: true              # mechanism 3: first turns balance resident session KV
      nodeLocalFetchSPerToken: null  # s/token of a node-local (DRAM over PCIe) load; null = NIC rate
      footprintWindowS: 30.0       # time constant of the session-KV footprint decay
      globalCapacityTokens: null   # picker's g estimate without KV events: store size; null = full

Defaults are stated assumptions fixed before any measurement (docs/policies.md, "smetric-tiered"):
``footprintWindowS`` = 30 s, three times the median think time between agentic turns (~10 s,
issue 11 and docs/traces.md), so a session counts while it is likely to come back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MECHANISMS: tuple[str, ...] = ("global", "migration", "node-local", "footprint")
DEFAULT_FOOTPRINT_WINDOW_S = 30.0


@dataclass(frozen=True, slots=True)
class TieredParams:
    global_aware: bool = True
    cost_aware_migration: bool = True
    node_local: bool = True
    footprint: bool = True
    node_local_fetch_s_per_token: float | None = None
    footprint_window_s: float = DEFAULT_FOOTPRINT_WINDOW_S
    global_capacity_tokens: int | None = None

    def __post_init__(self) -> None:
        nl = self.node_local_fetch_s_per_token
        if nl is not None and not (math.isfinite(nl) and nl >= 0):
            raise ValueError(f"node_local_fetch_s_per_token must be None or finite and >= 0, got {nl}")
        cap = self.global_capacity_tokens
        if cap is not None and cap < 1:
            raise ValueError(f"global_capacity_tokens must be None or >= 1, got {cap}")
        w = self.footprint_window_s
        if not (math.isfinite(w) and w > 0):
            raise ValueError(f"footprint_window_s must be finite and > 0, got {w}")

    def without(self, *mechanisms: str) -> TieredParams:
        """These params with the named mechanisms (:data:`MECHANISMS`) switched off."""
        from dataclasses import replace

        unknown = [m for m in mechanisms if m not in MECHANISMS]
        if unknown:
            raise ValueError(f"unknown mechanisms {unknown}; known: {', '.join(MECHANISMS)}")
        return replace(
            self,
            global_aware=self.global_aware and "global" not in mechanisms,
            cost_aware_migration=self.cost_aware_migration and "migration" not in mechanisms,
            node_local=self.node_local and "node-local" not in mechanisms,
            footprint=self.footprint and "footprint" not in mechanisms,
        )
