"""SMetric (both modes): table-driven decisions on hand-built snapshots.

Cost model for readability: ``cost(n, L) = 1 ms * n`` (c_att = 0), TTFT SLO = 1 s flat, so an
endpoint meets the SLO iff ``queued_prefill_cost + (L - hit) / 1000 <= 1``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from smetric.core.costmodel import CostModel
from smetric.core.slo import SloConfig
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import DecodeStepModel, PolicyParams
from smetric.policy.params import SMetricParams
from smetric.policy.smetric import SMetric

P = PolicyParams(
    mode="disaggregated",
    slo=SloConfig(ttft_base_s=1.0, ttft_per_ktok_s=0.0, tpot_s=0.020),
    cost_model=CostModel(c_lin_s=0.001, c_att_s=0.0),
    decode_step=DecodeStepModel(base_s=0.005, per_kv_token_s=1e-7),
)
COLO = replace(P, mode="colocated")


def ep(
    name: str, hit: int = 0, q: float = 0.0, running: int = 0, waiting: int = 0, kv: float = 0.0
) -> EndpointSnapshot:
    return EndpointSnapshot(
        name=name,
        local_hit_tokens=hit,
        queued_prefill_cost=q,
        queued_prefill_tokens=q * 1000,
        running=running,
        waiting=waiting,
        kv_usage=kv,
        kv_capacity_tokens=200_000,
    )


def req(prompt: int = 500, turn: int = 1, est_hit: int = 400, **kw: float) -> RequestView:
    return RequestView(request_id="r", prompt_tokens=prompt, turn=turn, est_hit_tokens=est_hit, **kw)  # type: ignore[arg-type]


CASES = [
    # id, params, request, endpoints, expected target, expected reason
    (
        "first-turn prefers system-prompt holder",
        P,
        req(2000, turn=0, est_hit=0),
        [ep("a"), ep("b", hit=1000), ep("c")],
        1,
        "balance",
    ),
    (
        "first-turn least queued",
        P,
        req(500, turn=0, est_hit=0),
        [ep("a", q=0.3), ep("b", q=0.1), ep("c", q=0.2)],
        1,
        "balance",
    ),
    (
        "stick when prev meets although another is idler",
        P,
        req(),
        [ep("a"), ep("b", hit=450, q=0.9)],
        1,
        "stick",
    ),
    (
        "migrate when prev misses and another meets",
        P,
        req(),
        [ep("a", q=0.2), ep("b", hit=450, q=1.0), ep("c", q=0.1)],
        2,
        "migrate",
    ),
    (
        "stick when nobody meets",
        P,
        req(),
        [ep("a", q=2.0), ep("b", hit=450, q=1.0), ep("c", q=3.0)],
        1,
        "stick",
    ),
    (
        "evicted session balances",
        P,
        req(),
        [ep("a", q=0.2), ep("b", hit=150, q=0.0), ep("c", q=0.1)],
        1,
        "evicted",
    ),
    (
        "hit exactly HIT_RATIO*est_hit is not cached",
        P,
        req(est_hit=400),
        [ep("a", q=0.0), ep("b", hit=200, q=0.5)],
        0,
        "evicted",
    ),
    (
        "slack 2 keeps a slow prev",
        P.with_own(SMetricParams(slack=2.0)),
        req(),
        [ep("a"), ep("b", hit=450, q=1.5)],
        1,
        "stick",
    ),
    (
        "per-request TTFT override tightens the check",
        P,
        req(ttft_slo_s=0.5),
        [ep("a", hit=300), ep("b", hit=450, q=0.5)],
        0,
        "migrate",
    ),
    (
        "highest hit identifies prev",
        P,
        req(),
        [ep("a", hit=100), ep("b", hit=300), ep("c", hit=450)],
        2,
        "stick",
    ),
    (
        "equal top hits: less loaded is prev",
        P,
        req(),
        [ep("a", hit=450, q=0.6), ep("b", hit=450, q=0.2)],
        1,
        "stick",
    ),
    # colocated: balance score multiplies by (b + 1)
    (
        "colocated balance uses (b+1)",
        COLO,
        req(500, turn=0, est_hit=0),
        [ep("a", q=0.0, running=9), ep("b", q=0.2, running=1)],
        1,
        "balance",
    ),
    (
        "disaggregated balance ignores b",
        P,
        req(500, turn=0, est_hit=0),
        [ep("a", q=0.0, running=9), ep("b", q=0.2, running=1)],
        0,
        "balance",
    ),
    # TPOT guard: prev decodes at 5 ms + 1e-7 * 100k = 15 ms; prefill 0.5 s of a 1 s horizon
    # doubles the mean inter-token time to 30 ms > 20 ms -> migrate to an endpoint without decodes.
    (
        "colocated TPOT guard migrates",
        COLO,
        req(),
        [ep("a", q=0.45), ep("b", hit=450, q=0.45, running=10, kv=0.5)],
        0,
        "migrate",
    ),
    (
        "disaggregated has no TPOT guard",
        P,
        req(),
        [ep("a", q=0.45), ep("b", hit=450, q=0.45, running=10, kv=0.5)],
        1,
        "stick",
    ),
    (
        "colocated guard passes with small KV",
        COLO,
        req(),
        [ep("a", q=0.45), ep("b", hit=450, q=0.45, running=10, kv=0.0)],
        1,
        "stick",
    ),
    (
        "colocated: nobody passes the guard -> stick",
        COLO,
        req(),
        [ep("a", q=0.45, running=10, kv=0.5), ep("b", hit=450, q=0.45, running=10, kv=0.5)],
        1,
        "stick",
    ),
]


@pytest.mark.parametrize(
    ("params", "request_", "endpoints", "target", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_decision(
    params: PolicyParams, request_: RequestView, endpoints: list[EndpointSnapshot], target: int, reason: str
) -> None:
    d = SMetric(params).pick(request_, endpoints)
    assert (d.target, d.reason) == (target, reason)
    assert len(d.scores) == len(endpoints)


def test_ties_round_robin_across_calls() -> None:
    policy = SMetric(P)
    eps = [ep("a"), ep("b"), ep("c")]
    picks = [policy.pick(req(turn=0, est_hit=0), eps).target for _ in range(6)]
    assert picks == [0, 1, 2, 0, 1, 2]


def test_ties_only_among_minima() -> None:
    policy = SMetric(P)
    eps = [ep("a", q=0.5), ep("b"), ep("c", q=0.5), ep("d")]
    picks = [policy.pick(req(turn=0, est_hit=0), eps).target for _ in range(4)]
    assert picks == [1, 3, 1, 3]


def test_migration_target_meets_slo_in_colocated_mode() -> None:
    # "a" has the smallest (b+1)-product but misses the SLO; "c" meets it.
    eps = [ep("a", q=1.2), ep("b", hit=450, q=1.0), ep("c", q=0.3, waiting=5)]
    d = SMetric(COLO).pick(req(), eps)
    assert (d.target, d.reason) == (2, "migrate")


def test_scores_are_wall_time_with_prefill_speed() -> None:
    fast = replace(ep("a", q=0.4), prefill_speed=2.0)
    d = SMetric(P).pick(req(turn=0, est_hit=0), [ep("b", q=0.3), fast])
    assert d.target == 1
    assert d.scores == pytest.approx((0.8, 0.45))


def test_bad_snapshot_values_fall_back() -> None:
    weird = EndpointSnapshot(
        name="w", queued_prefill_cost=float("nan"), prefill_speed=0.0, local_hit_tokens=10**9
    )
    d = SMetric(P).pick(req(turn=0, est_hit=0), [weird, ep("b", q=0.1)])
    assert d.target == 0  # hit clamped to L, NaN queue -> 0, speed -> 1.0: zero work
    assert d.scores[0] == 0.0


# --- opt-in global tier: meets counts the session prefix a non-prev endpoint can load ------------

LONG = RequestView("r", prompt_tokens=100_000, turn=5, est_hit_tokens=99_000)
GLOBAL_CASE = [ep("a"), ep("b", hit=99_500, q=30.0)]  # prev "b" is 30 s behind; SLO is 1 s flat


def test_without_global_tier_nobody_meets_and_session_sticks() -> None:
    d = SMetric(P).pick(LONG, GLOBAL_CASE)  # "a" would recompute 100k tokens: 100 s
    assert (d.target, d.reason) == (1, "stick")


# the router core fills g = min(est_hit, L) on every snapshot when a global tier is configured
GLOBAL_CASE_G = [replace(e, global_hit_tokens=99_000) for e in GLOBAL_CASE]


def test_with_global_tier_the_session_migrates() -> None:
    # "a" loads 99k tokens at 1 us each (0.099 s) and computes 1k at 1 ms each (1.0 s): 1.099 s <= 2 s
    params = replace(P, global_fetch_s_per_token=1e-6, slo=SloConfig(2.0, 0.0, 0.02))
    d = SMetric(params).pick(LONG, GLOBAL_CASE_G)
    assert (d.target, d.reason) == (0, "migrate")


def test_session_form_credits_est_hit_without_g() -> None:
    # meets_estimate=session reads est_hit, not the snapshot's g (the form before the tier estimate)
    params = replace(P, global_fetch_s_per_token=1e-6, slo=SloConfig(2.0, 0.0, 0.02))
    d = SMetric(params.with_own(SMetricParams(meets_estimate="session"))).pick(LONG, GLOBAL_CASE)
    assert (d.target, d.reason) == (0, "migrate")
    assert SMetric(params).pick(LONG, GLOBAL_CASE).reason == "stick"  # tier: g = 0 here, nobody meets


def test_slow_global_tier_does_not_help() -> None:
    params = replace(P, global_fetch_s_per_token=1e-4, slo=SloConfig(2.0, 0.0, 0.02))  # 9.9 s load
    stick = params.with_own(SMetricParams(nobody_meets="stick"))
    assert SMetric(stick).pick(LONG, GLOBAL_CASE_G).reason == "stick"  # the paper's rule
    # the default (least-loaded): nobody meets and the tier holds the session, so the engines'
    # queues decide -- prev is the busier one here
    busy_prev = [GLOBAL_CASE_G[0], replace(GLOBAL_CASE_G[1], running=3)]
    d = SMetric(params).pick(LONG, busy_prev)
    assert (d.target, d.reason) == (0, "migrate")
