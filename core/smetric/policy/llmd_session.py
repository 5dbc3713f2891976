"""llm-d (session) baseline: route by the true session id (the replay supplies it).

Score (higher is better) = affinity + load, with affinity 1 on the endpoint that owns the
session and ``load = (max_b - b[i]) / max_b`` (1 for every endpoint of an idle pool), as llm-d
combines its session-affinity and load-aware scorers. ``Decision.scores`` holds the negated
score (lower is better). Ties prefer the owner, then round-robin. A request without
``session_id`` or of an unknown session goes to the least active endpoint.

Memory: a session -> endpoint-name table updated by :meth:`on_dispatch` with the endpoint the
framework finally chose, bounded LRU (``sessionTableSize``): the least recently
routed session is forgotten first, so its next request is placed as a new session.
Reason ``stick`` when the owner is chosen, else ``balance``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from pydantic import Field

from smetric.core.names import REASON_BALANCE, REASON_STICK
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import Decision, PolicyParams
from smetric.policy.estimates import batch
from smetric.policy.params import ParamsModel
from smetric.policy.select import RoundRobinTies


class LlmdSessionParams(ParamsModel):
    session_table_size: int = Field(
        default=65_536,
        ge=1,
        description="Bound of the session -> endpoint LRU table (a stated memory budget).",
    )


class LlmdSession:
    name = "llmd-session"

    def __init__(self, params: PolicyParams) -> None:
        self._capacity = params.get(LlmdSessionParams).session_table_size
        self._owner: OrderedDict[str, str] = OrderedDict()
        self._ties = RoundRobinTies()

    def __len__(self) -> int:
        """Number of sessions remembered (never above ``session_table_size``)."""
        return len(self._owner)

    def pick(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> Decision:
        owner_name = self._owner.get(request.session_id) if request.session_id is not None else None
        b = [batch(ep) for ep in endpoints]
        b_max = max(b)
        scores = tuple(
            -((1.0 if ep.name == owner_name else 0.0) + ((b_max - b[i]) / b_max if b_max > 0 else 1.0))
            for i, ep in enumerate(endpoints)
        )
        best = min(scores)
        for i, ep in enumerate(endpoints):
            if ep.name == owner_name and scores[i] == best:
                return Decision(i, REASON_STICK, scores)
        return Decision(self._ties.argmin(scores), REASON_BALANCE, scores)

    def on_dispatch(self, request: RequestView, endpoint: str) -> None:
        sid = request.session_id
        if sid is None:
            return
        self._owner[sid] = endpoint
        self._owner.move_to_end(sid)
        if len(self._owner) > self._capacity:
            self._owner.popitem(last=False)
