"""Uniform random (sanity baseline), reproducible: a private ``random.Random(params.seed)``.

Two instances with the same seed make the same sequence of choices for the same sequence of
pool sizes. Reason ``balance``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from smetric.core.names import REASON_BALANCE
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import Decision, PolicyParams


class RandomPick:
    name = "random"

    def __init__(self, params: PolicyParams) -> None:
        self._rng = random.Random(params.seed)

    def pick(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> Decision:
        return Decision(self._rng.randrange(len(endpoints)), REASON_BALANCE)

    def on_dispatch(self, request: RequestView, endpoint: str) -> None:
        """Stateless (beyond the RNG)."""
