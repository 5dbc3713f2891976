"""LMetric (OSDI'26), as the SMetric paper describes it (§4.1).

``argmin_i (q[i] + L - c[i]) * (b[i] + 1)`` with ``q`` in tokens (the router's queued-prefill
ledger) and ``b`` = running + waiting; the first minimum wins. Always reason ``balance``.
"""

from __future__ import annotations

from collections.abc import Sequence

from smetric.core.names import REASON_BALANCE
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import Decision, PolicyParams
from smetric.policy.estimates import batch, local_hit, nonneg, prompt_tokens
from smetric.policy.select import argmin_first


class LMetric:
    name = "lmetric"

    def __init__(self, params: PolicyParams) -> None:
        self._params = params

    def pick(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> Decision:
        n = prompt_tokens(request)
        scores = tuple(
            (nonneg(ep.queued_prefill_tokens) + n - local_hit(request, ep)) * (batch(ep) + 1)
            for ep in endpoints
        )
        return Decision(argmin_first(scores), REASON_BALANCE, scores)

    def on_dispatch(self, request: RequestView, endpoint: str) -> None:
        """Stateless."""
