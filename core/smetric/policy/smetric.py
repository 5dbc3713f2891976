"""SMetric: balanced session-centric routing (paper §4.2, Fig. 13 and Appendix B).

``PolicyParams.mode`` selects the variant:

* ``disaggregated`` (prefill routing, Fig. 13, reconstructed): a follow-up request whose
  session is still cached sticks to ``prev`` iff ``meets(prev)`` or no endpoint meets, where
  ``meets(i) = (q[i] + cost(L - c[i], L)) / rate[i] <= SLACK * ttft_slo(L)``; otherwise it
  migrates to the least balance score among the endpoints that meet.
* ``colocated`` (Appendix B, reconstructed): the same rule, with the balance score multiplied
  by ``b[i] + 1`` and an endpoint admitted only if it also passes the TPOT guard
  (:func:`smetric.policy.estimates.tpot_guard_ok`: its running decodes keep the TPOT SLO if
  this prefill joins). The guard applies to sticking and to migration targets alike.

Global tier (``PolicyParams.global_fetch_s_per_token``: KV bytes per token / global-tier
bandwidth, set when the pool has one). ``SMetricParams.meets_estimate`` chooses ``meets``' TTFT
estimate:

* ``tier`` (default): the balance score's tier estimate
  (:func:`smetric.policy.estimates.tier_times_s`): ``(q[i] + cost(L - h[i], L)) / rate[i] +
  (h[i] - c[i]) * fetch + qf[i]`` with ``h[i] = max(c[i], g[i])`` -- the work the ledger
  charges, plus the queued fetch seconds the engine stalls for. The balance score, ``meets`` and
  the ledger charge the same work;
* ``session``: ``h[i] = max(c[i], est_hit)`` plus its fetch, no queued fetch
  (:func:`smetric.policy.estimates.ttft_with_global_tier_s`; local-only without a tier);
* ``local``: ``(q[i] + cost(L - c[i], L)) / rate[i]``, algorithms.md literally. With long
  agentic prompts an endpoint other than ``prev`` would have to recompute the whole session and
  almost never meets: the rule degenerates to basic stickiness.

Without a global tier ``g`` is 0 and the three coincide up to the (then zero) queued fetch.
``SMetricParams.nobody_meets`` chooses the fallback when no endpoint meets
(:mod:`smetric.policy.sessioncentric`).

Reasons: ``balance`` (first turn), ``evicted`` (follow-up whose session is no longer in any
local tier), ``stick``, ``migrate``. See :mod:`smetric.policy.sessioncentric` for the skeleton.
"""

from __future__ import annotations

from collections.abc import Sequence

from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import PolicyParams
from smetric.policy.estimates import (
    prefill_time_s,
    tier_times_s,
    ttft_with_global_tier_s,
)
from smetric.policy.params import SMetricParams
from smetric.policy.pieces import meets
from smetric.policy.sessioncentric import SessionCentric


class SMetric(SessionCentric):
    name = "smetric"
    params_model = SMetricParams
    # whether ``nobody_meets: least-loaded`` applies (the ablation SMetricSloTokens keeps stick)
    least_loaded_fallback = True

    def __init__(self, params: PolicyParams) -> None:
        super().__init__(params)
        own = params.get(SMetricParams)
        self._slack = own.slack
        self._meets = own.meets_estimate
        self._nobody_argmin = own.nobody_meets == "argmin"
        self._nobody_least_loaded = self.least_loaded_fallback and own.nobody_meets == "least-loaded"

    def eligible(
        self,
        request: RequestView,
        endpoints: Sequence[EndpointSnapshot],
        prev: int,
        times_s: Sequence[float],
        *,
        local_only: bool = False,
    ) -> list[bool] | None:
        # routed as without a tier (cachedMoves: backed): times_s is then the local estimate
        shown = times_s if local_only else self._meets_times_s(request, endpoints, times_s)
        return meets(request, endpoints, self.params, self._slack, shown)

    def _meets_times_s(
        self, request: RequestView, endpoints: Sequence[EndpointSnapshot], balance_s: Sequence[float]
    ) -> Sequence[float]:
        """``meets``' TTFT estimates (``meets_estimate``); the balance times when they are the same."""
        p = self.params
        cm, fetch = p.cost_model, p.global_fetch_s_per_token
        if self._meets == "tier":
            if self._tier_balance:
                return balance_s
            return tier_times_s(request, endpoints, cm, fetch, self._queued_fetch)
        if self._meets == "session" and fetch is not None:
            return [ttft_with_global_tier_s(request, ep, cm, fetch) for ep in endpoints]
        if not self._tier_balance:
            return balance_s
        return [prefill_time_s(request, ep, cm) for ep in endpoints]
