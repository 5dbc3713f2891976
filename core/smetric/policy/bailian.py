"""Bailian's production scheduler (linear), as the SMetric paper describes it (§4.1).

``f[i] = (1 - λ) * b[i] / max_j b[j] + λ * (1 - c[i] / L)``, lowest wins; λ = 0.7 by default
(large, favouring reuse, as operators set it for agents). Normalisation: the batch size by the
pool maximum (all-idle -> 0), the hit by the prompt length (already in [0, 1]). Ties
round-robin. Reason ``balance``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from smetric.core.names import REASON_BALANCE
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import Decision, PolicyParams
from smetric.policy.estimates import batch, local_hit, prompt_tokens
from smetric.policy.params import ParamsModel
from smetric.policy.select import RoundRobinTies


class BailianParams(ParamsModel):
    bailian_lambda: float = Field(
        default=0.7,
        ge=0,
        le=1,
        alias="lambda",
        description="Bailian's weight of KV reuse against batch size (paper §4.1).",
    )


class Bailian:
    name = "bailian"

    def __init__(self, params: PolicyParams) -> None:
        self._lambda = params.get(BailianParams).bailian_lambda
        self._ties = RoundRobinTies()

    def pick(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> Decision:
        lam = self._lambda
        n = prompt_tokens(request)
        b = [batch(ep) for ep in endpoints]
        b_max = max(b)
        scores = tuple(
            (1.0 - lam) * (b[i] / b_max if b_max > 0 else 0.0)
            + lam * (1.0 - (local_hit(request, ep) / n if n > 0 else 0.0))
            for i, ep in enumerate(endpoints)
        )
        return Decision(self._ties.argmin(scores), REASON_BALANCE, scores)

    def on_dispatch(self, request: RequestView, endpoint: str) -> None:
        """Stateless (beyond the tie counter)."""
