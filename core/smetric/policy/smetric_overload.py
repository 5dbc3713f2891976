"""Ablation 2, basic session-centric + overload migration (paper §5.4).

A cached follow-up sticks only if ``load(prev) <= OVERLOAD * mean(load)``; otherwise it
migrates to the least balance score among the endpoints within that bound.
``load[i]`` = queued prefill plus ongoing decode, both in tokens: the router's queued-prefill
ledger (``queued_prefill_tokens``) plus the KV tokens of running requests
(``kv_usage * kv_capacity_tokens``; 0 when the capacity is unknown, e.g. prefill-only pools).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import PolicyParams
from smetric.policy.estimates import decode_load_tokens, nonneg
from smetric.policy.params import SessionParams
from smetric.policy.sessioncentric import SessionCentric


class OverloadParams(SessionParams):
    overload: float = Field(
        default=2.0,
        ge=1,
        description="OVERLOAD: a cached follow-up sticks only if load(prev) <= OVERLOAD * mean load.",
    )


class SMetricOverload(SessionCentric):
    name = "smetric-overload"
    params_model = OverloadParams

    def __init__(self, params: PolicyParams) -> None:
        super().__init__(params)
        self._overload = params.get(OverloadParams).overload

    def eligible(
        self,
        request: RequestView,
        endpoints: Sequence[EndpointSnapshot],
        prev: int,
        times_s: Sequence[float],
        *,
        local_only: bool = False,
    ) -> list[bool] | None:
        loads = [nonneg(ep.queued_prefill_tokens) + decode_load_tokens(ep) for ep in endpoints]
        bound = self._overload * sum(loads) / len(loads)
        return [load <= bound for load in loads]
