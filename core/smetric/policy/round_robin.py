"""Round-robin (sanity baseline): the i-th call picks endpoint ``i mod n``. Reason ``balance``."""

from __future__ import annotations

from collections.abc import Sequence

from smetric.core.names import REASON_BALANCE
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import Decision, PolicyParams


class RoundRobin:
    name = "round-robin"

    def __init__(self, params: PolicyParams) -> None:
        self._next = 0

    def pick(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> Decision:
        target = self._next % len(endpoints)
        self._next += 1
        return Decision(target, REASON_BALANCE)

    def on_dispatch(self, request: RequestView, endpoint: str) -> None:
        """The counter advances in :meth:`pick`."""
