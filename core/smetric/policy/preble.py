"""Preble (ICLR'25) as ported by AIBrix's prefix-cache router, per the SMetric paper (§5.2).

1. Guard: if ``max(running) - min(running) > PREBLE_IMBALANCE_GUARD`` (8), route to the
   endpoint with the fewest running requests, ignoring the cache. Reason ``balance``.
2. If some endpoint's local hit covers more than ``PREBLE_HIT_FRACTION`` (50 %) of the prompt,
   route to the least loaded (fewest running + waiting) of those endpoints; among equal loads
   the longer hit wins. Scores: ``b[i] - c[i] / (L + 1)`` for the holders, ``inf`` otherwise.
   Reason ``stick`` (cache affinity).
3. Otherwise route to the least estimated work: the prefill tokens the endpoint must compute
   before this request's first token, ``q_tokens[i] + L - c[i]`` (Preble's missed-prefill cost
   plus the queued part of its load term). Reason ``balance``.

Ties round-robin.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field

from smetric.core.names import REASON_BALANCE, REASON_STICK
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import Decision, PolicyParams
from smetric.policy.estimates import batch, local_hit, nonneg, prompt_tokens
from smetric.policy.params import ParamsModel
from smetric.policy.select import RoundRobinTies


class PrebleParams(ParamsModel):
    preble_hit_fraction: float = Field(
        default=0.5,
        gt=0,
        lt=1,
        description="PREBLE_HIT_FRACTION: a local hit above this share of the prompt is cached.",
    )
    preble_imbalance_guard: int = Field(
        default=8,
        ge=0,
        description="PREBLE_IMBALANCE_GUARD: running-count spread above which the cache is ignored.",
    )


class Preble:
    name = "preble"

    def __init__(self, params: PolicyParams) -> None:
        own = params.get(PrebleParams)
        self._hit_fraction = own.preble_hit_fraction
        self._guard = own.preble_imbalance_guard
        self._ties = RoundRobinTies()

    def pick(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> Decision:
        running = [max(0, ep.running) for ep in endpoints]
        if max(running) - min(running) > self._guard:
            scores = tuple(float(r) for r in running)
            return Decision(self._ties.argmin(scores), REASON_BALANCE, scores)
        n = prompt_tokens(request)
        hits = [local_hit(request, ep) for ep in endpoints]
        threshold = self._hit_fraction * n
        if n > 0 and max(hits) > threshold:
            scores = tuple(
                batch(ep) - hits[i] / (n + 1) if hits[i] > threshold else math.inf
                for i, ep in enumerate(endpoints)
            )
            return Decision(self._ties.argmin(scores), REASON_STICK, scores)
        scores = tuple(nonneg(ep.queued_prefill_tokens) + n - hits[i] for i, ep in enumerate(endpoints))
        return Decision(self._ties.argmin(scores), REASON_BALANCE, scores)

    def on_dispatch(self, request: RequestView, endpoint: str) -> None:
        """Stateless (beyond the tie counter)."""
