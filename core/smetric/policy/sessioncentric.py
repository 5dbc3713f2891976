"""The session-centric template shared by SMetric and its ablations (paper Fig. 13).

Every variant runs the same skeleton and differs only in *which endpoints may keep or take a
follow-up request* (:meth:`SessionCentric.eligible`):

```
prev   = argmax_i c[i]                       # ties: least balance score, then round-robin
cached = c[prev] > HIT_RATIO * est_hit
turn == 0            -> balance   (argmin balance score, ties round-robin)
not cached           -> evicted   (same as balance)
eligible is None     -> stick     (basic: stick unconditionally)
eligible[prev]       -> stick
no endpoint eligible -> stick     (nobody meets; or argmin balance score: nobody_meets)
otherwise            -> migrate   (argmin balance score among eligible endpoints)
```

Balance score (Fig. 13 (c), Appendix B): ``t[i]`` disaggregated, ``t[i] * (b[i] + 1)``
colocated, where ``t[i]`` is (``SessionParams.balance_estimate``):

* ``tier`` (default): :func:`smetric.policy.estimates.tier_times_s`, the work the dispatch
  ledger charges (``h[i] = max(c[i], g[i])``: compute of ``L - h[i]``, fetch of ``h[i] - c[i]``)
  plus the endpoint's queued fetch seconds. The score, ``meets`` and the ledger then charge the
  same work: an evicted long session whose copy is in the global tier costs every endpoint about
  the same, so the argmin follows the queues rather than a partial local prefix;
* ``local``: ``(q[i] + cost(L - c[i], L)) / rate[i]``, algorithms.md literally (ablation).

Both subtract the local hit, so a first turn prefers an endpoint that holds its system prompt.

"Nobody meets" (``SMetricParams.nobody_meets``): ``stick`` keeps the session on ``prev``
(algorithms.md); ``argmin`` sends it to the least balance score; ``least-loaded`` sends every
request that no endpoint can serve within its SLO (first turns and evicted follow-ups too) to the
least ``4 * waiting + running`` of the engines' gauges -- where it can move at the cost of a
global-tier fetch (a pool with a tier; a first turn, or a session whose prefix the tier holds).

A small tier (``cachedMoves: backed``): a follow-up whose session a GPU still holds, in a pool whose global tier
holds less than the engines' HBM, is scored and checked with the local estimate and never takes the least-loaded
fallback (:func:`smetric.policy.pieces.stays_put`): moving it would duplicate it on the target and evict sessions
the tier no longer holds. Only a session its GPU holds ``cachedMovesRoom`` (4) times over: a larger one is evicted
there before its next turn anyway.

Reconstruction notes: (1) the score is divided by ``rate[i]`` so it is the same wall-time
estimate the SLO check uses (identical to the paper's cost units when all rates are 1.0);
(2) a migration chooses among the *eligible* endpoints: literally ``argmin`` over all, which
in disaggregated mode is the same endpoint (the least time meets the SLO whenever anyone
does), while in colocated mode the ``(b+1)`` product could otherwise send the session to an
endpoint that misses the SLO it is migrating to meet.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from smetric.core.names import REASON_BALANCE, REASON_EVICTED, REASON_MIGRATE, REASON_STICK
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import Decision, PolicyParams
from smetric.policy.estimates import batch, local_hit, prefill_time_s, tier_times_s
from smetric.policy.load_balance import queue_load
from smetric.policy.params import SessionParams
from smetric.policy.pieces import movable, stays_put
from smetric.policy.select import RoundRobinTies


class SessionCentric:
    """Base of the SMetric family; subclasses override :meth:`eligible` (and set ``name``)."""

    name = "session-centric"
    # the subclass's policy-owned parameters (its registered ``Params``)
    params_model: type[SessionParams] = SessionParams

    def __init__(self, params: PolicyParams) -> None:
        self._params = params
        self._ties = RoundRobinTies()
        own = params.get(self.params_model)
        self._hit_ratio = own.hit_ratio
        self._tier_balance = own.balance_estimate == "tier"
        self._queued_fetch = own.queued_fetch
        # cachedMoves: backed (smetric.policy.pieces.stays_put)
        self._backed = own.cached_moves == "backed"
        self._room = own.cached_moves_room
        # a cached follow-up nobody can serve within its SLO: stick (False) or argmin (True)
        self._nobody_argmin = False
        # any request nobody can serve within its SLO: the least loaded by the engines' gauges
        self._nobody_least_loaded = False

    @property
    def params(self) -> PolicyParams:
        return self._params

    def eligible(
        self,
        request: RequestView,
        endpoints: Sequence[EndpointSnapshot],
        prev: int,
        times_s: Sequence[float],
        *,
        local_only: bool = False,
    ) -> list[bool] | None:
        """Which endpoints may serve the follow-up request; ``None`` = stick unconditionally.
        ``times_s`` are the balance score's time estimates ``t[i]`` (see the module docstring); ``local_only``: the
        request is routed as without a tier (``cachedMoves: backed``, :func:`smetric.policy.pieces.stays_put`)."""
        return None

    def pick(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> Decision:
        local_only = self._backed and stays_put(request, endpoints, self._params, self._hit_ratio, self._room)
        times = self.balance_times_s(request, endpoints, local_only=local_only)
        if self._params.mode == "colocated":
            scores = [t * (batch(ep) + 1) for t, ep in zip(times, endpoints, strict=True)]
        else:
            scores = times
        frozen = tuple(scores)
        ok: list[bool] | None = None
        if self._nobody_least_loaded and not local_only and self._movable(request, endpoints):
            ok = self.eligible(request, endpoints, -1, times)
            if ok is not None and not any(ok):
                return self._least_loaded(request, endpoints, scores)
        if request.turn <= 0:
            return Decision(self._ties.argmin(scores), REASON_BALANCE, frozen)
        prev = self._previous(request, endpoints, scores)
        if not local_hit(request, endpoints[prev]) > self._hit_ratio * max(0, request.est_hit_tokens):
            return Decision(self._ties.argmin(scores), REASON_EVICTED, frozen)
        if ok is None:
            # the keyword only when set, so an ``eligible`` written without it still works
            ok = (
                self.eligible(request, endpoints, prev, times, local_only=True)
                if local_only
                else self.eligible(request, endpoints, prev, times)
            )
        if ok is None or ok[prev]:
            return Decision(prev, REASON_STICK, frozen)
        if not any(ok):
            if self._nobody_argmin:
                target = self._ties.argmin(scores)
                return Decision(target, REASON_STICK if target == prev else REASON_MIGRATE, frozen)
            return Decision(prev, REASON_STICK, frozen)
        masked = [s if ok[i] else math.inf for i, s in enumerate(scores)]
        return Decision(self._ties.argmin(masked), REASON_MIGRATE, frozen)

    def _movable(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> bool:
        """The request can go anywhere at the cost of a fetch (:func:`smetric.policy.pieces.movable`, the
        framework's overload fallback uses the same test)."""
        return movable(request, endpoints, self._params, self._hit_ratio)

    def _least_loaded(
        self, request: RequestView, endpoints: Sequence[EndpointSnapshot], scores: Sequence[float]
    ) -> Decision:
        """Nobody meets (``nobody_meets: least-loaded``): the least ``4 * waiting + running`` of the
        engines' own gauges, ties round-robin. Past the knee no estimate promises the SLO, and the
        least estimated time herds requests that the engines' queue lengths spread (measured:
        docs/policies.md). Reasons as usual: balance, evicted, stick or migrate."""
        loads = list(map(queue_load, endpoints))
        target = self._ties.argmin(loads)
        if request.turn <= 0:
            return Decision(target, REASON_BALANCE, tuple(loads))
        prev = self._previous(request, endpoints, scores)
        if not local_hit(request, endpoints[prev]) > self._hit_ratio * max(0, request.est_hit_tokens):
            return Decision(target, REASON_EVICTED, tuple(loads))
        return Decision(target, REASON_STICK if target == prev else REASON_MIGRATE, tuple(loads))

    def balance_times_s(
        self, request: RequestView, endpoints: Sequence[EndpointSnapshot], *, local_only: bool = False
    ) -> list[float]:
        """``t[i]`` of the balance score (``balance_estimate``, module docstring; ``local_only``: the local
        estimate whatever ``balance_estimate`` says)."""
        p = self._params
        if self._tier_balance and not local_only:
            return tier_times_s(
                request, endpoints, p.cost_model, p.global_fetch_s_per_token, self._queued_fetch
            )
        return [prefill_time_s(request, ep, p.cost_model) for ep in endpoints]

    def _previous(
        self, request: RequestView, endpoints: Sequence[EndpointSnapshot], scores: Sequence[float]
    ) -> int:
        """The endpoint that most likely served the previous turn: the highest local hit; among
        equal hits the least loaded (lowest balance score), then round-robin."""
        hits = [local_hit(request, ep) for ep in endpoints]
        top = max(hits)
        masked = [s if hits[i] == top else math.inf for i, s in enumerate(scores)]
        return self._ties.argmin(masked)

    def on_dispatch(self, request: RequestView, endpoint: str) -> None:
        """Stateless across requests (beyond the tie counter)."""
