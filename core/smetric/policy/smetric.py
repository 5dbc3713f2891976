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

Global tier (opt-in, ``PolicyParams.global_fetch_s_per_token``). As written, ``meets`` counts
only local hits, so with long agentic prompts an endpoint other than ``prev`` would have to
recompute the whole session and almost never meets: the rule degenerates to basic stickiness.
The paper migrates "with the global tier preserving its KV$ reuse"; when the pool has a fully
provisioned global tier, set ``global_fetch_s_per_token`` (KV bytes per token / global-tier
bandwidth) and ``meets`` uses ``h[i] = max(c[i], est_hit)`` uncached tokens plus the time to
load ``h[i] - c[i]`` tokens (:func:`smetric.policy.estimates.ttft_with_global_tier_s`). The
balance score keeps subtracting the local hit only, as in the paper.

Reasons: ``balance`` (first turn), ``evicted`` (follow-up whose session is no longer in any
local tier), ``stick``, ``migrate``. See :mod:`smetric.policy.sessioncentric` for the skeleton.
"""

from __future__ import annotations

from collections.abc import Sequence

from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import PolicyParams
from smetric.policy.estimates import prompt_tokens, request_slo, tpot_guard_ok, ttft_with_global_tier_s
from smetric.policy.params import SMetricParams
from smetric.policy.sessioncentric import SessionCentric


class SMetric(SessionCentric):
    name = "smetric"
    params_model = SMetricParams

    def __init__(self, params: PolicyParams) -> None:
        super().__init__(params)
        self._slack = params.get(SMetricParams).slack

    def eligible(
        self,
        request: RequestView,
        endpoints: Sequence[EndpointSnapshot],
        prev: int,
        times_s: Sequence[float],
    ) -> list[bool] | None:
        p = self.params
        slo = request_slo(request, p)
        deadline_s = self._slack * slo.ttft_slo_s(prompt_tokens(request))
        fetch = p.global_fetch_s_per_token
        if fetch is not None:
            times_s = [ttft_with_global_tier_s(request, ep, p.cost_model, fetch) for ep in endpoints]
        if p.mode != "colocated":
            return [t <= deadline_s for t in times_s]
        return [
            t <= deadline_s and tpot_guard_ok(ep, t, deadline_s, slo.tpot_s, p.decode_step)
            for t, ep in zip(times_s, endpoints, strict=True)
        ]
