"""SMetric ablations (paper §5.4): basic, overload migration, SLO migration with token counts.

Same readable model as test_policy_smetric: cost = 1 ms per uncached token, TTFT SLO 1 s.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from smetric.core.costmodel import CostModel
from smetric.core.slo import SloConfig
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import PolicyParams
from smetric.policy.params import SMetricParams
from smetric.policy.sessioncentric import SessionCentric
from smetric.policy.smetric import SMetric
from smetric.policy.smetric_basic import SMetricBasic
from smetric.policy.smetric_overload import OverloadParams, SMetricOverload
from smetric.policy.smetric_slo_tokens import SMetricSloTokens

P = PolicyParams(
    mode="disaggregated",
    slo=SloConfig(ttft_base_s=1.0, ttft_per_ktok_s=0.0, tpot_s=0.020),
    cost_model=CostModel(c_lin_s=0.001, c_att_s=0.0),
)
FOLLOW_UP = RequestView("r", prompt_tokens=500, turn=2, est_hit_tokens=400)
FIRST = RequestView("r", prompt_tokens=500)


def ep(
    name: str, hit: int = 0, q_tokens: float = 0.0, q_cost: float | None = None, kv: float = 0.0
) -> EndpointSnapshot:
    return EndpointSnapshot(
        name=name,
        local_hit_tokens=hit,
        queued_prefill_tokens=q_tokens,
        queued_prefill_cost=q_tokens / 1000 if q_cost is None else q_cost,
        kv_usage=kv,
        kv_capacity_tokens=100_000,
    )


def test_basic_sticks_however_loaded() -> None:
    d = SMetricBasic(P).pick(FOLLOW_UP, [ep("a"), ep("b", hit=450, q_tokens=50_000)])
    assert (d.target, d.reason) == (1, "stick")


@pytest.mark.parametrize("cls", [SMetricBasic, SMetricOverload, SMetricSloTokens, SMetric])
def test_all_variants_share_balance_and_eviction(cls: type[SessionCentric]) -> None:
    system_prompt_holder = [ep("a", q_tokens=100), ep("b", hit=300, q_tokens=100)]
    assert (
        cls(P).pick(FIRST, system_prompt_holder).target,
        cls(P).pick(FIRST, system_prompt_holder).reason,
    ) == (
        1,
        "balance",
    )
    evicted = cls(P).pick(FOLLOW_UP, [ep("a", hit=100, q_tokens=300), ep("b")])
    assert (evicted.target, evicted.reason) == (1, "evicted")


@pytest.mark.parametrize(
    ("loads", "target", "reason"),
    [
        # load = queued tokens + kv_usage * 100k; prev is "b" (hit 450)
        ([0, 2000, 1000], 1, "stick"),  # mean 1000, 2000 <= 2 * 1000
        ([0, 2100, 1000], 0, "migrate"),  # 2100 > 2 * 1033
        ([3000, 3000, 3000], 1, "stick"),  # balanced: never migrates
    ],
)
def test_overload_rule(loads: list[int], target: int, reason: str) -> None:
    eps = [ep("a", q_tokens=loads[0]), ep("b", hit=450, q_tokens=loads[1]), ep("c", q_tokens=loads[2])]
    d = SMetricOverload(P).pick(FOLLOW_UP, eps)
    assert (d.target, d.reason) == (target, reason)


def test_overload_counts_decode_kv() -> None:
    # prev has no queued prefill but a KV-heavy decode batch: 0.5 * 100k = 50k tokens.
    eps = [ep("a", q_tokens=1000), ep("b", hit=450, kv=0.5), ep("c", q_tokens=1000)]
    d = SMetricOverload(P).pick(FOLLOW_UP, eps)
    assert d.reason == "migrate"


def test_overload_factor_is_a_parameter() -> None:
    eps = [ep("a"), ep("b", hit=450, q_tokens=2100), ep("c", q_tokens=1000)]
    assert SMetricOverload(P.with_own(OverloadParams(overload=3.0))).pick(FOLLOW_UP, eps).reason == "stick"


def test_slo_tokens_uses_token_counts_not_queued_cost() -> None:
    # Queued *tokens* say 1.2 s (> 1 s SLO); the queued *cost* says 0.1 s.
    eps = [ep("a"), ep("b", hit=450, q_tokens=1200, q_cost=0.1)]
    assert SMetricSloTokens(P).pick(FOLLOW_UP, eps).reason == "migrate"
    assert SMetric(P).pick(FOLLOW_UP, eps).reason == "stick"


def test_slo_tokens_nobody_meets_sticks() -> None:
    eps = [ep("a", q_tokens=5000), ep("b", hit=450, q_tokens=1200)]
    d = SMetricSloTokens(P).pick(FOLLOW_UP, eps)
    assert (d.target, d.reason) == (1, "stick")


def test_slo_tokens_with_global_tier() -> None:
    long = RequestView("r", prompt_tokens=100_000, turn=5, est_hit_tokens=99_000)
    eps = [ep("a"), ep("b", hit=99_500, q_tokens=30_000)]
    assert SMetricSloTokens(P).pick(long, eps).reason == "stick"
    params = replace(P, global_fetch_s_per_token=1e-6, slo=SloConfig(2.0, 0.0, 0.02))
    # the router core fills g = min(est_hit, L) when a global tier is configured
    with_g = [replace(e, global_hit_tokens=99_000) for e in eps]
    assert SMetricSloTokens(params).pick(long, with_g).reason == "migrate"
    # the session form credits est_hit whatever g says
    session = params.with_own(SMetricParams(meets_estimate="session"))
    assert SMetricSloTokens(session).pick(long, eps).reason == "migrate"
