"""Parameters of ``smetric-tiered`` (one switch per mechanism, for the ablation rows).

``smetric-tiered``'s ``Params`` (:class:`SMetricTieredParams`, registered in
:mod:`smetric.policy.registry`) holds them as one field, so the YAML/CRD key is one object::

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
docs/traces.md), so a session counts while it is likely to come back.
"""

from __future__ import annotations

from pydantic import Field

from smetric.policy.params import HitRatioParams, ParamsModel, SlackParams

MECHANISMS: tuple[str, ...] = ("global", "migration", "node-local", "footprint")
DEFAULT_FOOTPRINT_WINDOW_S = 30.0


class TieredParams(ParamsModel):
    """The ``tiered`` object: one switch per mechanism and the policy's own parameters."""

    global_aware: bool = Field(
        default=True, description="mechanism 1: h[i] = max(c[i], g[i]) + fetch and link backlog"
    )
    cost_aware_migration: bool = Field(
        default=True, description="mechanism 2: migrate only when the TTFT gain beats the move"
    )
    node_local: bool = Field(default=True, description="mechanism 2: prefer targets on the session's node")
    footprint: bool = Field(default=True, description="mechanism 3: first turns balance resident session KV")
    node_local_fetch_s_per_token: float | None = Field(
        default=None, ge=0, description="s/token of a node-local (DRAM over PCIe) load; omitted = NIC rate"
    )
    footprint_window_s: float = Field(
        default=DEFAULT_FOOTPRINT_WINDOW_S,
        gt=0,
        description="time constant of the session-KV footprint decay (s)",
    )
    global_capacity_tokens: int | None = Field(
        default=None,
        ge=1,
        description="the picker's global-hit estimate without KV events: store size in tokens; omitted = full",
    )

    def without(self, *mechanisms: str) -> TieredParams:
        """These params with the named mechanisms (:data:`MECHANISMS`) switched off."""
        unknown = [m for m in mechanisms if m not in MECHANISMS]
        if unknown:
            raise ValueError(f"unknown mechanisms {unknown}; known: {', '.join(MECHANISMS)}")
        return self.model_copy(
            update={
                "global_aware": self.global_aware and "global" not in mechanisms,
                "cost_aware_migration": self.cost_aware_migration and "migration" not in mechanisms,
                "node_local": self.node_local and "node-local" not in mechanisms,
                "footprint": self.footprint and "footprint" not in mechanisms,
            }
        )


class SMetricTieredParams(HitRatioParams, SlackParams):
    """``smetric-tiered``'s ``Params``: SMetric's SLACK / HIT_RATIO and the ``tiered`` object."""

    tiered: TieredParams = Field(
        default_factory=lambda: TieredParams(),
        description="smetric-tiered only: one switch per mechanism (ablations) and its own parameters; "
        "omitted keys keep the defaults (docs/policies.md, smetric-tiered).",
    )
