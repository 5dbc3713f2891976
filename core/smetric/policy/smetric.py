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

Reasons: ``balance`` (first turn), ``evicted`` (follow-up whose session is no longer in any
local tier), ``stick``, ``migrate``. See :mod:`smetric.policy.sessioncentric` for the skeleton.
"""

from __future__ import annotations

from collections.abc import Sequence

from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.estimates import prompt_tokens, request_slo, tpot_guard_ok
from smetric.policy.sessioncentric import SessionCentric


class SMetric(SessionCentric):
    name = "smetric"

    def eligible(
        self,
        request: RequestView,
        endpoints: Sequence[EndpointSnapshot],
        prev: int,
        times_s: Sequence[float],
    ) -> list[bool] | None:
        p = self.params
        slo = request_slo(request, p)
        deadline_s = p.slack * slo.ttft_slo_s(prompt_tokens(request))
        if p.mode != "colocated":
            return [t <= deadline_s for t in times_s]
        return [
            t <= deadline_s and tpot_guard_ok(ep, t, deadline_s, slo.tpot_s, p.decode_step)
            for t, ep in zip(times_s, endpoints, strict=True)
        ]
