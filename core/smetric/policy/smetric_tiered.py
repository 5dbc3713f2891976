"""``smetric-tiered``: SMetric's session rule with both KV tiers and the cost of moving KV in view.

Beyond the paper; ``smetric`` stays the faithful reconstruction. Each mechanism has a
switch in :class:`~smetric.policy.tiered_params.TieredParams`; with every switch off the policy
decides exactly as ``smetric`` with its literal estimates (``balanceEstimate: local``,
``meetsEstimate: session``, ``nobodyMeets: stick``; same scores, same rule, same tie breaks).

Per endpoint i, with ``L`` prompt tokens, ``c[i]`` local hit, ``g[i]`` global-tier hit
(``EndpointSnapshot.global_hit_tokens``), ``h[i] = max(c[i], g[i])``:

``fetch[i] = (h[i] - c[i]) * f[i] + backlog[i]`` when ``h[i] > c[i]`` (else 0), where ``f[i]`` is
``global_fetch_s_per_token`` (NIC) or, for a target on the session's node with
``nodeLocalFetchSPerToken`` set, that node-local rate (no NIC backlog then); ``backlog[i]`` is
the larger of the endpoint's reported link backlog and the queued global fetch time
(``queued_fetch_s``) of all endpoints on its node (they share one NIC).

``t_tier[i] = (q[i] + cost(L - h[i], L)) / rate[i] + fetch[i]``.

1. **Global-tier awareness** (``globalAware``): ``t_tier`` replaces SMetric's two estimates (the
   balance score's local-only time and ``meets``' ``max(c, est_hit)`` time) in the balance score
   and in ``meets``. Off: SMetric's estimates. Needs ``global_fetch_s_per_token``; without it
   (no global tier) the switch has no effect.
2. **Cost-aware, hierarchical migration** (``costAwareMigration``, ``nodeLocal``): a session that
   misses its deadline on ``prev`` moves only to an endpoint whose ``t_tier`` (fetch and backlog
   included) is below ``prev``'s -- the TTFT gained must exceed the cost of the move -- else it
   sticks. Among the endpoints allowed, those on ``prev``'s node are preferred.
3. **Footprint-aware placement** (``footprint``): first turns and evicted sessions minimise the
   balance score times ``1 + F[i] / C[i]`` where ``F[i]`` is the session KV recently written to
   the endpoint's local tier (``session_kv_tokens``, :mod:`smetric.policy.footprint`) and ``C[i]``
   its KV capacity in tokens (factor 1 where the capacity is unknown).

Stated assumptions: the footprint factor's form (one capacity-worth of recent session KV counts
like doubling the load) and the preference for same-node targets are fixed before measuring; the
rule never reads a session id.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from smetric.core.names import REASON_BALANCE, REASON_EVICTED, REASON_MIGRATE, REASON_STICK
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import Decision, PolicyParams
from smetric.policy.estimates import (
    batch,
    local_hit,
    nonneg,
    prefill_time_s,
    prompt_tokens,
    request_slo,
    speed,
    tpot_guard_ok,
    ttft_with_global_tier_s,
)
from smetric.policy.select import RoundRobinTies
from smetric.policy.tiered_params import SMetricTieredParams


def global_hit(request: RequestView, ep: EndpointSnapshot) -> int:
    """g[i], clamped to ``[0, L]``."""
    return min(max(0, ep.global_hit_tokens), prompt_tokens(request))


def node_backlogs_s(endpoints: Sequence[EndpointSnapshot]) -> list[float]:
    """Per endpoint: the larger of its reported link backlog and the queued global fetch time of
    every endpoint on its node (an endpoint without a node name is its own node)."""
    per_node: dict[str, float] = {}
    for ep in endpoints:
        if ep.node:
            per_node[ep.node] = per_node.get(ep.node, 0.0) + nonneg(ep.queued_fetch_s)
    return [
        max(nonneg(ep.link_backlog_s), per_node[ep.node] if ep.node else nonneg(ep.queued_fetch_s))
        for ep in endpoints
    ]


def with_tier_facts(
    s: EndpointSnapshot, global_hit_tokens: int, node: str, session_kv_tokens: float
) -> EndpointSnapshot:
    """``s`` with the two-tier fields set: a direct constructor call, ~10x cheaper than
    ``dataclasses.replace`` on the hot path (a test checks every other field is copied)."""
    return EndpointSnapshot(
        name=s.name,
        local_hit_tokens=s.local_hit_tokens,
        queued_prefill_tokens=s.queued_prefill_tokens,
        queued_prefill_cost=s.queued_prefill_cost,
        running=s.running,
        waiting=s.waiting,
        kv_usage=s.kv_usage,
        kv_capacity_tokens=s.kv_capacity_tokens,
        prefill_speed=s.prefill_speed,
        stale=s.stale,
        global_hit_tokens=global_hit_tokens,
        queued_fetch_s=s.queued_fetch_s,
        link_backlog_s=s.link_backlog_s,
        node=node,
        session_kv_tokens=session_kv_tokens,
    )


class SMetricTiered:
    name = "smetric-tiered"
    # The simulator and the picker fill global_hit_tokens, node and session_kv_tokens only for a
    # policy whose registry entry says it reads them (PolicyEntry.uses_tier_view).

    def __init__(self, params: PolicyParams) -> None:
        self._params = params
        self._own = params.get(SMetricTieredParams)
        self._ties = RoundRobinTies()

    @property
    def params(self) -> PolicyParams:
        return self._params

    def tier_times_s(
        self,
        request: RequestView,
        endpoints: Sequence[EndpointSnapshot],
        home: str,
        local: Sequence[int] | None = None,
    ) -> list[float]:
        """``t_tier[i]``: queued plus own compute on ``L - h[i]`` tokens plus the fetch of
        ``h[i] - c[i]`` tokens behind the link backlog (0 fetch without a known tier). ``local``:
        the clamped local hits when the caller has them already. The hot loop: one cost-model
        evaluation per distinct ``h`` (most endpoints share ``h = g``)."""
        p = self._params
        cost, fetch_nic = p.cost_model.cost, p.global_fetch_s_per_token
        tp = self._own.tiered
        nl = tp.node_local_fetch_s_per_token if tp.node_local else None
        n = prompt_tokens(request)
        if local is None:
            local = [local_hit(request, ep) for ep in endpoints]
        if fetch_nic is None:
            return [
                (nonneg(ep.queued_prefill_cost) + cost(n - c, n)) / speed(ep)
                for ep, c in zip(endpoints, local, strict=True)
            ]
        backlog = node_backlogs_s(endpoints)
        own: dict[int, float] = {}
        out: list[float] = []
        for ep, c, wait_s in zip(endpoints, local, backlog, strict=True):
            g = ep.global_hit_tokens
            h = c if g <= c else (g if g < n else n)
            own_s = own.get(h)
            if own_s is None:
                own_s = own[h] = cost(n - h, n)
            t = (nonneg(ep.queued_prefill_cost) + own_s) / speed(ep)
            if h > c:
                if nl is not None and home and ep.node == home:
                    t += (h - c) * nl
                else:
                    t += (h - c) * fetch_nic + wait_s
            out.append(t)
        return out

    def pick(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> Decision:
        p, own = self._params, self._own
        tp = own.tiered
        cm, fetch = p.cost_model, p.global_fetch_s_per_token
        colocated = p.mode == "colocated"
        local = [local_hit(request, ep) for ep in endpoints]
        top = max(local)
        home = (
            next((ep.node for ep, c in zip(endpoints, local, strict=True) if c == top), "") if top > 0 else ""
        )
        aware = tp.global_aware and fetch is not None
        tier = self.tier_times_s(request, endpoints, home, local) if aware else None
        times = tier if tier is not None else [prefill_time_s(request, ep, cm) for ep in endpoints]
        if colocated:
            scores = [t * (batch(ep) + 1) for t, ep in zip(times, endpoints, strict=True)]
        else:
            scores = list(times)

        if request.turn <= 0:
            return self._balance(scores, endpoints, REASON_BALANCE)
        masked_top = [s if local[i] == top else math.inf for i, s in enumerate(scores)]
        prev = self._ties.argmin(masked_top)
        if not local[prev] > own.hit_ratio * max(0, request.est_hit_tokens):
            return self._balance(scores, endpoints, REASON_EVICTED)

        frozen = tuple(scores)
        slo = request_slo(request, p)
        deadline_s = own.slack * slo.ttft_slo_s(prompt_tokens(request))
        if tier is not None and aware:
            meets_t = tier
        elif fetch is not None:
            meets_t = [ttft_with_global_tier_s(request, ep, cm, fetch) for ep in endpoints]
        else:
            meets_t = times
        ok = [t <= deadline_s for t in meets_t]
        if colocated:
            ok = [
                o and tpot_guard_ok(ep, t, deadline_s, slo.tpot_s, p.decode_step)
                for o, t, ep in zip(ok, meets_t, endpoints, strict=True)
            ]
        if ok[prev] or not any(ok):
            return Decision(prev, REASON_STICK, frozen)
        if tp.cost_aware_migration:
            if tier is None:
                tier = self.tier_times_s(request, endpoints, home, local)
            # the move must pay for itself: TTFT there, fetch and backlog included, below prev's
            ok = [o and tier[i] < tier[prev] for i, o in enumerate(ok)]
            if not any(ok):
                return Decision(prev, REASON_STICK, frozen)
        if tp.node_local and endpoints[prev].node:
            same = [o and endpoints[i].node == endpoints[prev].node for i, o in enumerate(ok)]
            if any(same):
                ok = same
        masked = [s if ok[i] else math.inf for i, s in enumerate(scores)]
        return Decision(self._ties.argmin(masked), REASON_MIGRATE, frozen)

    def _balance(self, scores: list[float], endpoints: Sequence[EndpointSnapshot], reason: str) -> Decision:
        if self._own.tiered.footprint:
            scores = [
                s * (1.0 + nonneg(ep.session_kv_tokens) / ep.kv_capacity_tokens)
                if ep.kv_capacity_tokens > 0
                else s
                for s, ep in zip(scores, endpoints, strict=True)
            ]
        return Decision(self._ties.argmin(scores), reason, tuple(scores))

    def on_dispatch(self, request: RequestView, endpoint: str) -> None:
        """Stateless across requests (beyond the tie counter); the footprint lives in the view."""
