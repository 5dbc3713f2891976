"""Load-balance-only (vLLM's default flavour): lowest ``4 * waiting + running`` wins.

Ignores KV reuse entirely. Ties round-robin (so an idle pool is filled evenly rather than
always from its first endpoint). Reason ``balance``.
"""

from __future__ import annotations

from collections.abc import Sequence

from smetric.core.names import REASON_BALANCE
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import Decision, PolicyParams
from smetric.policy.select import RoundRobinTies


def queue_load(ep: EndpointSnapshot) -> float:
    """``4 * waiting + running`` of the engine's own gauges (also SMetric's least-loaded fallback)."""
    return float(4 * max(0, ep.waiting) + max(0, ep.running))


class LoadBalance:
    name = "load-balance"

    def __init__(self, params: PolicyParams) -> None:
        self._ties = RoundRobinTies()

    def pick(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> Decision:
        scores = tuple(map(queue_load, endpoints))
        return Decision(self._ties.argmin(scores), REASON_BALANCE, scores)

    def on_dispatch(self, request: RequestView, endpoint: str) -> None:
        """Stateless (beyond the tie counter)."""
