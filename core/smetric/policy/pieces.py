"""Framework pieces any policy is configured with: the tier-aware work estimate and the overload fallback.

SMetric's measured gains come from two mechanisms the paper's rule does not have (docs/evidence.md, "Where the gain
comes from"): the work estimate that credits the global tier's copy (g from the tier model, its fetch time and the
queued fetch) and, when no endpoint meets its SLO, sending the request to the least-loaded engine. Here they are
pieces of the framework, composed around any registered policy as GIE composes filters and scorers around a
picker: ``X+pieces`` is policy ``X`` as its project ships it with both pieces, registered for every baseline
(:mod:`smetric.policy.registry`). Its own keys (``piecesTierAware``, ``piecesFallback``) switch each piece off
for ablations.

**Tier-aware work estimate** (``piecesTierAware``, a snapshot transform in front of the policy): the policy sees
each endpoint as the ledger charges it (:func:`smetric.router.dispatch_work`). With ``h = max(c, min(g, L))``:

* ``local_hit_tokens`` = ``h``: the tokens the endpoint does not compute (its own, and the tier's copy);
* ``queued_prefill_cost`` += ``(h - c) * fetch + queued_fetch_s``: the fetch this request adds and the fetches
  queued before it (the engine's synchronous load stalls its batch for them), in the cost model's seconds;
* ``queued_prefill_tokens`` += the same seconds at this prompt's mean per-token cost (``cost(L, L) / L``), for
  the policies that count tokens (LMetric's ``q + L - c``).

So a policy that scores cache affinity by ``c`` (LMetric, Dynamo, Preble, BaiLian, the llm-d scorers) scores it by
what a move really costs: an evicted session whose prefix the tier holds costs every endpoint about the same fetch,
and the queues decide. Without a global tier (``global_fetch_s_per_token`` unset) the snapshots are unchanged.

**Overload fallback** (``piecesFallback: least-loaded``): SMetric's ``nobodyMeets: least-loaded``. If no endpoint
meets the request's TTFT deadline (``SLACK x ttft_slo(L)``) by the tier-aware estimate
(:func:`smetric.policy.estimates.tier_times_s`), and in colocated mode the TPOT guard, and the request can move
at the cost of a fetch (a pool with a tier, and a first turn or a session whose prefix the tier holds), it goes to
the least ``4 x waiting + running`` of the engines' gauges (ties round-robin), reason ``overload``. Otherwise the
policy decides. SMetric's own ``nobodyMeets: least-loaded`` calls the same functions (:func:`movable`,
:func:`nobody_meets`).

**A tier too small to back the GPUs** (``cachedMoves: backed``, :func:`stays_put`): a follow-up whose session a
GPU still holds, in a pool whose tier holds less than the engines' HBM (:func:`tier_backs_gpus`), skips both
pieces: the policy sees it as in a pool without a tier. First turns and sessions no GPU holds keep them. SMetric's
own tier estimate and fallback follow the same test (:mod:`smetric.policy.sessioncentric`). Chosen on development
seeds 0-2 (docs/evidence.md, "No global tier and a small one"). ``cachedMovesRoom`` (default 4) limits it to a session
its GPU holds four times over: a larger one is evicted there before its next turn anyway (docs/policies.md; 4 chosen
on development seeds 0-2 of one H20 per instance, docs/evidence.md, "One H20 per instance").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Literal

from pydantic import Field

from smetric.core.names import REASON_OVERLOAD
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import Decision, Policy, PolicyParams
from smetric.policy.estimates import (
    local_hit,
    nonneg,
    prompt_tokens,
    request_slo,
    tier_times_s,
    tpot_guard_ok,
)
from smetric.policy.load_balance import queue_load
from smetric.policy.params import CachedMovesParams, HitRatioParams, SlackParams
from smetric.policy.select import RoundRobinTies

PIECES_SUFFIX = "+pieces"


class PiecesParams(HitRatioParams, SlackParams, CachedMovesParams):
    """The pieces' switches (HIT_RATIO, SLACK and cachedMoves as SMetric's: the movable test, the deadline and
    when the tier may move a session a GPU holds)."""

    pieces_tier_aware: bool = Field(
        default=True,
        description="X+pieces: show the policy the tier-aware work estimate (hit = max(c, g), the fetch "
        "and the queued fetch added to the queue); false = the policy's own view (ablation).",
    )
    pieces_fallback: Literal["least-loaded", "none"] = Field(
        default="least-loaded",
        description="X+pieces: when no endpoint meets the TTFT deadline by the tier-aware estimate and "
        "the request can move at the cost of a fetch, the least 4 x waiting + running (least-loaded); "
        "none = the policy decides (ablation).",
    )


def tier_capacity_tokens(params: PolicyParams, n_endpoints: int) -> int | None:
    """The global tier's capacity in KV tokens: ``global_segment_tokens`` per engine pod (the operator renders
    it from ``globalKV.segmentSize``) x the endpoints; ``None`` = a fully provisioned tier."""
    seg = params.global_segment_tokens
    return None if seg is None else seg * max(1, n_endpoints)


def tier_backs_gpus(endpoints: Sequence[EndpointSnapshot], params: PolicyParams) -> bool:
    """The global tier can hold what the GPUs evict: its capacity is at least the endpoints' total KV capacity
    (``kv_capacity_tokens``, vLLM's ``num_gpu_blocks x block_size``); true when either is unknown.

    Why the pool's HBM is the bound: every block an engine computes goes to its GPU and (LMCache writes through)
    to the tier, so both see the same stream of new blocks -- the tier the whole pool's, each GPU its share. With
    LRU-like eviction a block lives about ``capacity / write rate`` in each: ``C_tier / W`` in the tier,
    ``C_gpu / (W / n) = C_hbm / W`` on its GPU. A block the GPUs evict is still in the tier only if
    ``C_tier >= C_hbm``. Below that, a session moved off the GPU that holds it duplicates it on the target, which
    evicts other sessions the tier no longer holds: they are recomputed (measured: docs/evidence.md, "No global
    tier and a small one")."""
    cap = tier_capacity_tokens(params, len(endpoints))
    if cap is None:
        return True
    hbm = sum(max(0, ep.kv_capacity_tokens) for ep in endpoints)
    return hbm <= 0 or cap >= hbm


def stays_put(
    request: RequestView,
    endpoints: Sequence[EndpointSnapshot],
    params: PolicyParams,
    hit_ratio: float,
    room: float,
) -> bool:
    """``cachedMoves: backed``: a follow-up whose session a GPU still holds (``max c > HIT_RATIO * est_hit``), in a
    pool whose tier cannot back the GPUs (:func:`tier_backs_gpus`), is routed as without a tier: no tier credit, no
    overload fallback. First turns and sessions no GPU holds keep both. ``room`` (``cachedMovesRoom``): only a
    session whose GPU (the longest local hit) holds ``room`` times its prompt; a session that fills a large share
    of its GPU is evicted there before its next turn anyway (0 = every session)."""
    if params.global_fetch_s_per_token is None or request.turn <= 0:
        return False
    if params.global_segment_tokens is None or not endpoints:
        return False
    hits = [local_hit(request, ep) for ep in endpoints]
    c = max(hits)
    if not c > hit_ratio * max(0, request.est_hit_tokens):
        return False
    if room > 0:
        cap = endpoints[hits.index(c)].kv_capacity_tokens
        if 0 < cap < room * prompt_tokens(request):
            return False
    return not tier_backs_gpus(endpoints, params)


def movable(
    request: RequestView, endpoints: Sequence[EndpointSnapshot], params: PolicyParams, hit_ratio: float
) -> bool:
    """The request can go anywhere at the cost of a fetch, not a recompute: the pool has a global tier and the
    request is a first turn or its session's prefix is in that tier (``g > HIT_RATIO * est_hit``). Without a tier,
    moving a long session recomputes it (spreading by queue length then lost up to 97 %, docs/policies.md)."""
    if params.global_fetch_s_per_token is None:
        return False
    if request.turn <= 0:
        return True
    g = max((ep.global_hit_tokens for ep in endpoints), default=0)
    return g > hit_ratio * max(0, request.est_hit_tokens)


def meets(
    request: RequestView,
    endpoints: Sequence[EndpointSnapshot],
    params: PolicyParams,
    slack: float,
    times_s: Sequence[float],
) -> list[bool]:
    """Per endpoint, whether ``times_s`` (TTFT estimates) is within ``SLACK x ttft_slo(L)``, and in colocated mode
    the endpoint's running decodes keep their TPOT SLO (SMetric's ``meets``, Appendix B)."""
    slo = request_slo(request, params)
    deadline_s = slack * slo.ttft_slo_s(prompt_tokens(request))
    if params.mode != "colocated":
        return [t <= deadline_s for t in times_s]
    return [
        t <= deadline_s and tpot_guard_ok(ep, t, deadline_s, slo.tpot_s, params.decode_step)
        for t, ep in zip(times_s, endpoints, strict=True)
    ]


def nobody_meets(
    request: RequestView, endpoints: Sequence[EndpointSnapshot], params: PolicyParams, slack: float
) -> bool:
    """No endpoint meets by the tier-aware estimate (with the queued fetch)."""
    times = tier_times_s(request, endpoints, params.cost_model, params.global_fetch_s_per_token, True)
    return not any(meets(request, endpoints, params, slack, times))


def least_loaded(
    endpoints: Sequence[EndpointSnapshot], ties: RoundRobinTies
) -> tuple[int, tuple[float, ...]]:
    """The least ``4 * waiting + running`` of the engines' own gauges (ties round-robin) and the loads."""
    loads = tuple(map(queue_load, endpoints))
    return ties.argmin(loads), loads


def tier_aware_view(
    request: RequestView, endpoints: Sequence[EndpointSnapshot], params: PolicyParams
) -> list[EndpointSnapshot]:
    """The snapshots as the ledger charges them (module docstring); unchanged without a global tier."""
    fetch = params.global_fetch_s_per_token
    if fetch is None:
        return list(endpoints)
    n = prompt_tokens(request)
    per_token_s = params.cost_model.cost(n, n) / n if n > 0 else 0.0
    out: list[EndpointSnapshot] = []
    for ep in endpoints:
        c = local_hit(request, ep)
        h = max(c, min(max(0, ep.global_hit_tokens), n))
        extra_s = (h - c) * fetch + nonneg(ep.queued_fetch_s)
        if h == c and extra_s == 0.0:
            out.append(ep)
            continue
        extra_tokens = extra_s / per_token_s if per_token_s > 0 else 0.0
        out.append(
            replace(
                ep,
                local_hit_tokens=h,
                queued_prefill_cost=nonneg(ep.queued_prefill_cost) + extra_s,
                queued_prefill_tokens=nonneg(ep.queued_prefill_tokens) + extra_tokens,
            )
        )
    return out


class WithPieces:
    """Policy ``inner`` with the framework pieces (module docstring). Decisions index the caller's endpoints."""

    def __init__(self, inner: Policy, params: PolicyParams) -> None:
        self._inner = inner
        self._params = params
        own = params.get(PiecesParams)
        self._tier_aware = own.pieces_tier_aware
        self._fallback = own.pieces_fallback == "least-loaded"
        self._hit_ratio = own.hit_ratio
        self._slack = own.slack
        self._backed = own.cached_moves == "backed"
        self._room = own.cached_moves_room
        self._ties = RoundRobinTies()
        self.name = inner.name + PIECES_SUFFIX

    @property
    def inner(self) -> Policy:
        return self._inner

    def pick(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> Decision:
        p = self._params
        if self._backed and stays_put(request, endpoints, p, self._hit_ratio, self._room):
            return self._inner.pick(request, endpoints)
        if (
            self._fallback
            and movable(request, endpoints, p, self._hit_ratio)
            and nobody_meets(request, endpoints, p, self._slack)
        ):
            target, loads = least_loaded(endpoints, self._ties)
            return Decision(target, REASON_OVERLOAD, loads)
        shown = tier_aware_view(request, endpoints, p) if self._tier_aware else endpoints
        return self._inner.pick(request, shown)

    def on_dispatch(self, request: RequestView, endpoint: str) -> None:
        self._inner.on_dispatch(request, endpoint)
