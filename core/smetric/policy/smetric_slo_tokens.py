"""Ablation 3, SLO-aware migration with token counts as cost (paper §5.4).

SMetric's ``meets`` rule with the Eq. 1 cost model replaced by token counts:
``time[i] = (q_tokens[i] + L - c[i]) * c_lin / rate[i] <= SLACK * ttft_slo(L)``. The balance
branch is SMetric's (Fig. 13 (c)); the TPOT guard of the full colocated variant is not part of
this ablation. ``SMetricParams.meets_estimate`` picks the token-count form of SMetric's
estimates: ``tier`` (default) ``(q_tokens[i] + L - h[i]) * c_lin / rate[i] + (h[i] - c[i]) *
fetch + qf[i]`` (:func:`smetric.policy.estimates.tier_time_tokens_s`), ``session`` the
``max(c, est_hit)`` form with its fetch (``global_fetch_s_per_token`` set), ``local`` the
local-only one.
"""

from __future__ import annotations

from collections.abc import Sequence

from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.estimates import (
    prefill_time_tokens_s,
    prompt_tokens,
    request_slo,
    tier_time_tokens_s,
    ttft_tokens_with_global_tier_s,
)
from smetric.policy.params import SMetricParams
from smetric.policy.smetric import SMetric


class SMetricSloTokens(SMetric):
    """SMetric's parameters and balance branch; its own ``eligible`` (token counts as cost)."""

    name = "smetric-slo-tokens"
    params_model = SMetricParams
    # least-loaded (smetric's default) is not applied here: the ablation keeps the paper's
    # fallback (stick) with it, as when its tables were measured (docs/policies.md)
    least_loaded_fallback = False

    def eligible(
        self,
        request: RequestView,
        endpoints: Sequence[EndpointSnapshot],
        prev: int,
        times_s: Sequence[float],
        *,
        local_only: bool = False,
    ) -> list[bool] | None:
        p = self.params
        deadline_s = self._slack * request_slo(request, p).ttft_slo_s(prompt_tokens(request))
        c_lin = p.cost_model.c_lin_s
        fetch = p.global_fetch_s_per_token
        if local_only:  # routed as without a tier (cachedMoves: backed)
            times = [prefill_time_tokens_s(request, ep, c_lin) for ep in endpoints]
        elif self._meets == "tier":
            times = [tier_time_tokens_s(request, ep, c_lin, fetch, self._queued_fetch) for ep in endpoints]
        elif self._meets == "session" and fetch is not None:
            times = [ttft_tokens_with_global_tier_s(request, ep, c_lin, fetch) for ep in endpoints]
        else:
            times = [prefill_time_tokens_s(request, ep, c_lin) for ep in endpoints]
        return [t <= deadline_s for t in times]
