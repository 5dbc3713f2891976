"""Per-endpoint estimates the policies share: prefill time, SLO checks, the TPOT guard, loads.

All functions are pure. Snapshot values that cannot be meaningful are sanitised with a
documented fallback rather than propagated (a NaN would silently disable every comparison):

* ``prefill_speed`` that is not finite and > 0 is taken as 1.0 (the cost model as is);
* negative or non-finite queue, KV-usage and hit values are taken as 0;
* a local or global hit larger than the prompt is clamped to the prompt length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from smetric.core.costmodel import CostModel
from smetric.core.slo import SloConfig
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import DecodeStepModel, PolicyParams


def nonneg(x: float) -> float:
    """``x`` if it is finite and positive, else 0 (documented sanitising fallback)."""
    return x if math.isfinite(x) and x > 0.0 else 0.0


def speed(ep: EndpointSnapshot) -> float:
    """The endpoint's prefill speed, 1.0 where the reported value is unusable."""
    s = ep.prefill_speed
    return s if math.isfinite(s) and s > 0.0 else 1.0


def prompt_tokens(request: RequestView) -> int:
    return max(0, request.prompt_tokens)


def local_hit(request: RequestView, ep: EndpointSnapshot) -> int:
    """c[i], clamped to ``[0, L]``."""
    return min(max(0, ep.local_hit_tokens), prompt_tokens(request))


def request_slo(request: RequestView, params: PolicyParams) -> SloConfig:
    """The pool SLO with the request's ``x-slo-*`` overrides applied."""
    if request.ttft_slo_s is None and request.tpot_slo_s is None:
        return params.slo
    return params.slo.with_overrides(request.ttft_slo_s, request.tpot_slo_s)


def prefill_time_s(request: RequestView, ep: EndpointSnapshot, cost_model: CostModel) -> float:
    """``(q[i] + cost(L - c[i], L)) / rate[i]``: queued plus own prefill, in seconds."""
    n = prompt_tokens(request)
    own = cost_model.cost(n - local_hit(request, ep), n)
    return (nonneg(ep.queued_prefill_cost) + own) / speed(ep)


def prefill_time_tokens_s(request: RequestView, ep: EndpointSnapshot, c_lin_s: float) -> float:
    """Token-count estimate (ablation 3): ``(q_tokens[i] + L - c[i]) * c_lin / rate[i]``."""
    tokens = nonneg(ep.queued_prefill_tokens) + prompt_tokens(request) - local_hit(request, ep)
    return tokens * c_lin_s / speed(ep)


def session_hit(request: RequestView, ep: EndpointSnapshot) -> int:
    """The hit endpoint i gets if it loads the session's previous turn from a fully provisioned
    global tier: ``max(c[i], min(est_hit, L))`` (``est_hit`` is 0 on a first turn)."""
    return max(local_hit(request, ep), min(max(0, request.est_hit_tokens), prompt_tokens(request)))


def global_hit(request: RequestView, ep: EndpointSnapshot) -> int:
    """g[i] (``EndpointSnapshot.global_hit_tokens``), clamped to ``[0, L]``."""
    return min(max(0, ep.global_hit_tokens), prompt_tokens(request))


def tier_times_s(
    request: RequestView,
    endpoints: Sequence[EndpointSnapshot],
    cost_model: CostModel,
    fetch_s_per_token: float | None,
    queued_fetch: bool = True,
) -> list[float]:
    """Per endpoint, the TTFT estimate of the work the dispatch ledger charges
    (:func:`smetric.router.dispatch_work`), with ``h[i] = max(c[i], g[i])``:

    ``(q[i] + cost(L - h[i], L)) / rate[i] + (h[i] - c[i]) * fetch + qf[i]``

    ``q[i]`` is the ledger's queued compute (cost-model seconds), ``cost(L - h[i], L)`` this
    request's computed tokens, ``(h[i] - c[i]) * fetch`` the load of the tokens the endpoint
    does not hold but the global tier does (fetch time only for those), and ``qf[i]`` the
    ledger's queued fetch seconds (``queued_fetch_s``; the engine's synchronous load stalls the
    batch for them; dropped when ``queued_fetch`` is false). Without a global tier ``g`` is 0
    and this is :func:`prefill_time_s` plus the queued fetch; ``fetch_s_per_token`` ``None``
    counts loaded tokens at 0 s, as the ledger does. One cost-model evaluation per distinct
    ``h`` (most endpoints share ``h = g``).

    The same form serves asynchronous loads (LMCacheMPConnector: the request waits while the
    batch runs on): the request's own load still queues behind its node's link backlog, and its
    compute behind the queue once loaded; an overlapping form ``max(q / rate, fetch) + cost /
    rate`` without the queued fetch was measured and did worse (docs/policies.md).
    """
    n = prompt_tokens(request)
    cost = cost_model.cost
    per_token = fetch_s_per_token if fetch_s_per_token is not None else 0.0
    own: dict[int, float] = {}
    out: list[float] = []
    for ep in endpoints:
        c = min(max(0, ep.local_hit_tokens), n)
        g = ep.global_hit_tokens
        h = c if g <= c else (g if g < n else n)
        own_s = own.get(h)
        if own_s is None:
            own_s = own[h] = cost(n - h, n)
        t = (nonneg(ep.queued_prefill_cost) + own_s) / speed(ep) + (h - c) * per_token
        if queued_fetch:
            t += nonneg(ep.queued_fetch_s)
        out.append(t)
    return out


def tier_time_tokens_s(
    request: RequestView,
    ep: EndpointSnapshot,
    c_lin_s: float,
    fetch_s_per_token: float | None,
    queued_fetch: bool = True,
) -> float:
    """Token-count variant of :func:`tier_times_s` (ablation 3):
    ``(q_tokens[i] + L - h[i]) * c_lin / rate[i] + (h[i] - c[i]) * fetch + qf[i]``."""
    c, h = local_hit(request, ep), max(local_hit(request, ep), global_hit(request, ep))
    tokens = nonneg(ep.queued_prefill_tokens) + prompt_tokens(request) - h
    per_token = fetch_s_per_token if fetch_s_per_token is not None else 0.0
    t = tokens * c_lin_s / speed(ep) + (h - c) * per_token
    return t + nonneg(ep.queued_fetch_s) if queued_fetch else t


def ttft_with_global_tier_s(
    request: RequestView, ep: EndpointSnapshot, cost_model: CostModel, fetch_s_per_token: float
) -> float:
    """``meets`` estimate with a global tier: ``(q[i] + cost(L - h[i], L)) / rate[i] +
    (h[i] - c[i]) * fetch`` with ``h[i]`` = :func:`session_hit`."""
    n = prompt_tokens(request)
    c, h = local_hit(request, ep), session_hit(request, ep)
    return (nonneg(ep.queued_prefill_cost) + cost_model.cost(n - h, n)) / speed(ep) + (
        h - c
    ) * fetch_s_per_token


def ttft_tokens_with_global_tier_s(
    request: RequestView, ep: EndpointSnapshot, c_lin_s: float, fetch_s_per_token: float
) -> float:
    """Token-count variant of :func:`ttft_with_global_tier_s` (ablation 3)."""
    c, h = local_hit(request, ep), session_hit(request, ep)
    tokens = nonneg(ep.queued_prefill_tokens) + prompt_tokens(request) - h
    return tokens * c_lin_s / speed(ep) + (h - c) * fetch_s_per_token


def batch(ep: EndpointSnapshot) -> int:
    """b[i] = running + waiting, negative counts taken as 0."""
    return max(0, ep.running) + max(0, ep.waiting)


def decode_step_s(ep: EndpointSnapshot, model: DecodeStepModel) -> float:
    """One decode step of the endpoint's running batch: weights once plus its active KV."""
    return model.base_s + model.per_kv_token_s * decode_load_tokens(ep)


def tpot_guard_ok(
    ep: EndpointSnapshot, prefill_s: float, horizon_s: float, tpot_slo_s: float, model: DecodeStepModel
) -> bool:
    """Whether the endpoint's running decodes keep their TPOT SLO if this prefill joins.

    Reconstruction (the paper's Appendix B gives no formula). With chunked prefill every engine
    step carries one token of each running decode, and a decode's TPOT is its mean inter-token
    time. If the endpoint must spend ``prefill_s`` (its queued prefill plus this request's,
    i.e. the ``meets`` estimate) within the request's TTFT horizon ``horizon_s``, the decodes
    get ``horizon_s - prefill_s`` of pure decode steps of length ``d`` each, plus the prefill
    chunks; their mean inter-token time over the horizon is then ``d / (1 - prefill_s /
    horizon_s)``. The guard passes when that is within the TPOT SLO. An endpoint with no
    running request has no decode to hurt and always passes.
    """
    if ep.running <= 0:
        return True
    if horizon_s <= 0.0 or prefill_s >= horizon_s:
        return False
    d = decode_step_s(ep, model)
    return d / (1.0 - prefill_s / horizon_s) <= tpot_slo_s


def decode_load_tokens(ep: EndpointSnapshot) -> float:
    """KV tokens held by running requests (``kv_usage * capacity``); 0 when capacity is unknown."""
    return nonneg(ep.kv_usage) * max(0, ep.kv_capacity_tokens)
