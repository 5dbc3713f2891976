"""llm-d (SLO) baseline: predicted-latency routing.

Per endpoint, predict TTFT = ``(q[i] + cost(L - c[i], L)) / rate[i]`` (the same cost model
and queue SMetric uses; llm-d trains its predictor online, here the model stands in for it)
and TPOT = one decode step with this request's KV added (:class:`DecodeStepModel`:
``base + per_kv * (active_kv[i] + L)``). Endpoints predicted within both SLOs (no slack: the
SLOs scored against) are kept and the one with the *least* TTFT headroom
(``ttft_slo - predicted``) wins, packing work so the others keep room. Scores are the
headroom (``inf`` outside the SLO). If none is predicted within the SLOs, fall back to the
least loaded (fewest running + waiting), scores = batch size. Ties round-robin. Reason
``balance``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from smetric.core.names import REASON_BALANCE
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import Decision, PolicyParams
from smetric.policy.estimates import (
    batch,
    decode_load_tokens,
    prefill_time_s,
    prompt_tokens,
    request_slo,
)
from smetric.policy.select import RoundRobinTies


class LlmdSlo:
    name = "llmd-slo"

    def __init__(self, params: PolicyParams) -> None:
        self._params = params
        self._ties = RoundRobinTies()

    def pick(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> Decision:
        p = self._params
        slo = request_slo(request, p)
        n = prompt_tokens(request)
        ttft_slo_s = slo.ttft_slo_s(n)
        step = p.decode_step
        scores: list[float] = []
        for ep in endpoints:
            ttft_s = prefill_time_s(request, ep, p.cost_model)
            tpot_s = step.base_s + step.per_kv_token_s * (decode_load_tokens(ep) + n)
            ok = ttft_s <= ttft_slo_s and tpot_s <= slo.tpot_s
            scores.append(ttft_slo_s - ttft_s if ok else math.inf)
        if any(s != math.inf for s in scores):
            return Decision(self._ties.argmin(scores), REASON_BALANCE, tuple(scores))
        loads = tuple(float(batch(ep)) for ep in endpoints)
        return Decision(self._ties.argmin(loads), REASON_BALANCE, loads)

    def on_dispatch(self, request: RequestView, endpoint: str) -> None:
        """Stateless (beyond the tie counter)."""
