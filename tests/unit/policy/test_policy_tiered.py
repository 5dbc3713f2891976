"""smetric-tiered: one decision table per mechanism, the all-off == smetric property, the
footprint tracker, and its YAML/registry wiring.

Cost model for readability: ``cost(n, L) = 1 ms * n`` (c_att = 0), TTFT SLO = 1 s flat, global
fetch 0.1 ms per token: an endpoint meets the SLO iff ``q + (L - h) / 1000 + fetch <= 1``.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from smetric.core.costmodel import CostModel
from smetric.core.slo import SloConfig
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy import known_policies, make_policy, params_from_mapping
from smetric.policy.base import DecodeStepModel, PolicyParams
from smetric.policy.footprint import FootprintTracker
from smetric.policy.params import SMetricParams
from smetric.policy.registry import BASELINE_POLICIES
from smetric.policy.smetric import SMetric
from smetric.policy.smetric_tiered import SMetricTiered, node_backlogs_s
from smetric.policy.tiered_params import MECHANISMS, SMetricTieredParams, TieredParams

FETCH = 1e-4
P = PolicyParams(
    mode="disaggregated",
    slo=SloConfig(ttft_base_s=1.0, ttft_per_ktok_s=0.0, tpot_s=0.020),
    cost_model=CostModel(c_lin_s=0.001, c_att_s=0.0),
    decode_step=DecodeStepModel(base_s=0.005, per_kv_token_s=1e-7),
    global_fetch_s_per_token=FETCH,
)
ALL_OFF = TieredParams().without(*MECHANISMS)


def only(*on: str) -> PolicyParams:
    return P.with_own(
        SMetricTieredParams(tiered=TieredParams().without(*(m for m in MECHANISMS if m not in on)))
    )


def ep(
    name: str,
    hit: int = 0,
    q: float = 0.0,
    g: int = 0,
    backlog: float = 0.0,
    node: str = "",
    fp: float = 0.0,
    qfetch: float = 0.0,
) -> EndpointSnapshot:
    return EndpointSnapshot(
        name=name,
        local_hit_tokens=hit,
        queued_prefill_cost=q,
        queued_prefill_tokens=q * 1000,
        kv_capacity_tokens=100_000,
        global_hit_tokens=g,
        link_backlog_s=backlog,
        node=node,
        session_kv_tokens=fp,
        queued_fetch_s=qfetch,
    )


def req(prompt: int = 500, turn: int = 1, est_hit: int = 400) -> RequestView:
    return RequestView(request_id="r", prompt_tokens=prompt, turn=turn, est_hit_tokens=est_hit)


def decide(params: PolicyParams, request: RequestView, eps: list[EndpointSnapshot]) -> tuple[int, str]:
    d = SMetricTiered(params).pick(request, eps)
    return d.target, d.reason


# --- mechanism 1: global-tier awareness -------------------------------------------------------


@pytest.mark.parametrize(
    ("on", "expected"),
    [(("global",), (1, "evicted")), ((), (0, "evicted"))],
)
def test_evicted_session_goes_where_the_global_tier_supplies_it(
    on: tuple[str, ...], expected: tuple[int, str]
) -> None:
    # no local copy anywhere (evicted); b holds little queue but the global tier supplies 900 of
    # 1000 tokens to every endpoint: aware scores a at 0.3 + 0.1 + 0.09 and b at 0.1 + 0.09 + ...
    eps = [ep("a", q=0.05), ep("b", q=0.1, g=900)]
    assert decide(only(*on), req(1000, est_hit=900), eps) == expected


def test_meets_credits_global_hit_and_link_backlog() -> None:
    # prev (a) holds the session but is queued 2 s; b can load 9000 tokens (0.9 s) plus compute 1 s
    r = req(10_000, est_hit=9000)
    prev = ep("a", hit=9000, q=2.0)
    far = ep("b", g=9000, q=0.0)
    assert decide(only("global"), r, [prev, far]) == (0, "stick")  # 1.0 + 0.9 > 1 s: nobody meets
    r2 = req(2000, est_hit=1900)
    prev2, far2 = ep("a", hit=1900, q=2.0), ep("b", g=1900)
    assert decide(only("global"), r2, [prev2, far2]) == (1, "migrate")  # 0.1 + 0.19 s
    busy_link = ep("b", g=1900, backlog=0.8)
    assert decide(only("global"), r2, [prev2, busy_link]) == (0, "stick")  # + 0.8 s backlog


def test_node_backlog_sums_queued_fetch_of_the_node() -> None:
    eps = [
        ep("a", node="n0", qfetch=0.2),
        ep("b", node="n0", qfetch=0.3),
        ep("c", node="n1", backlog=0.1),
        ep("d"),
    ]
    assert node_backlogs_s(eps) == pytest.approx([0.5, 0.5, 0.1, 0.0])


def test_without_a_known_tier_global_hits_are_ignored() -> None:
    params = replace(only("global"), global_fetch_s_per_token=None)
    eps = [ep("a", q=0.05), ep("b", q=0.1, g=900)]
    assert decide(params, req(1000, turn=0, est_hit=0), eps) == (0, "balance")


# --- mechanism 2: cost-aware, hierarchical migration -----------------------------------------


@pytest.mark.parametrize(("on", "expected"), [(("migration",), (0, "stick")), ((), (1, "migrate"))])
def test_migration_must_pay_for_its_fetch_and_backlog(on: tuple[str, ...], expected: tuple[int, str]) -> None:
    # global awareness off: SMetric's meets credits b with est_hit at NIC rate and no backlog
    # (0.1 + 0.19 s <= 1), but b's link is 5 s behind: staying (1.1 s) is faster than moving.
    r = req(2000, est_hit=1900)
    eps = [ep("a", hit=1900, q=1.0), ep("b", g=1900, backlog=5.0)]
    assert decide(only(*on), r, eps) == expected


@pytest.mark.parametrize(("on", "expected"), [(("node-local",), 2), ((), 1)])
def test_migration_prefers_the_sessions_node(on: tuple[str, ...], expected: int) -> None:
    r = req(2000, est_hit=1900)
    eps = [
        ep("prev", hit=1900, q=2.0, node="n0"),
        ep("other-node", g=1900, q=0.0, node="n1"),
        ep("same-node", g=1900, q=0.2, node="n0"),
    ]
    assert decide(only("global", *on), r, eps) == (expected, "migrate")


def test_node_local_fetch_rate_applies_on_the_sessions_node_only() -> None:
    params = P.with_own(SMetricTieredParams(tiered=TieredParams(node_local_fetch_s_per_token=1e-6)))
    pol = SMetricTiered(params)
    r = req(2000, est_hit=1900)
    eps = [
        ep("prev", hit=1900, node="n0"),
        ep("same", g=1900, node="n0", backlog=3.0),
        ep("far", g=1900, node="n1"),
    ]
    t = pol.tier_times_s(r, eps, "n0")
    assert t[1] == pytest.approx(0.1 + 1900 * 1e-6)  # PCIe rate, NIC backlog not charged
    assert t[2] == pytest.approx(0.1 + 1900 * FETCH)


# --- mechanism 3: footprint-aware placement --------------------------------------------------


@pytest.mark.parametrize(("on", "expected"), [(("footprint",), 1), ((), 0)])
def test_first_turn_avoids_endpoints_full_of_live_sessions(on: tuple[str, ...], expected: int) -> None:
    eps = [ep("a", fp=100_000.0), ep("b", q=0.1)]  # a: one capacity of recent session KV -> x2
    assert decide(only(*on), req(1000, turn=0, est_hit=0), eps) == (expected, "balance")


def test_footprint_does_not_move_a_cached_session() -> None:
    eps = [ep("a", hit=400, fp=500_000.0), ep("b")]
    assert decide(only("footprint"), req(), eps) == (0, "stick")


# --- all switches off == smetric ---------------------------------------------------------------


@pytest.mark.parametrize("mode", ["colocated", "disaggregated"])
@pytest.mark.parametrize("fetch", [None, FETCH])
def test_all_off_decides_exactly_as_smetric(mode: str, fetch: float | None) -> None:
    rng = random.Random(7)
    params = replace(P, mode=mode, global_fetch_s_per_token=fetch).with_own(  # type: ignore[arg-type]
        SMetricTieredParams(tiered=ALL_OFF),
        # smetric's literal estimates: local-hit balance score, max(c, est_hit) meets
        SMetricParams(balance_estimate="local", meets_estimate="session", nobody_meets="stick"),
    )
    a, b = SMetric(params), SMetricTiered(params)
    for _ in range(400):
        n = rng.randint(1, 6)
        L = rng.randint(1, 4000)
        r = req(L, turn=rng.choice([0, 1, 3]), est_hit=rng.randint(0, L))
        eps = [
            EndpointSnapshot(
                name=f"e{i}",
                local_hit_tokens=rng.choice([0, rng.randint(0, L)]),
                queued_prefill_cost=rng.choice([0.0, rng.uniform(0, 2)]),
                running=rng.randint(0, 4),
                waiting=rng.randint(0, 2),
                kv_usage=rng.uniform(0, 1),
                kv_capacity_tokens=100_000,
                global_hit_tokens=rng.randint(0, L),
                link_backlog_s=rng.uniform(0, 2),
                node=rng.choice(["", "n0", "n1"]),
                session_kv_tokens=rng.uniform(0, 2e5),
            )
            for i in range(n)
        ]
        da, db = a.pick(r, eps), b.pick(r, eps)
        assert (da.target, da.reason) == (db.target, db.reason)


# --- footprint tracker ------------------------------------------------------------------------


def test_footprint_tracker_adds_decays_and_forgets() -> None:
    t = FootprintTracker(window_s=10.0)
    t.add("a", 1000.0, now_s=0.0)
    t.add("a", 500.0, now_s=0.0)
    assert t.tokens("a", 0.0) == pytest.approx(1500.0)
    assert t.tokens("a", 10.0) == pytest.approx(1500.0 / 2.718281828, rel=1e-6)
    assert t.tokens("b", 5.0) == 0.0
    for bad in (float("nan"), -5.0, float("inf")):
        t.add("a", bad, now_s=0.0)
    assert t.tokens("a", 0.0) == pytest.approx(1500.0)
    assert t.tokens("a", -1.0) == pytest.approx(1500.0)  # clock went back: no growth
    t.forget("a")
    assert len(t) == 0
    with pytest.raises(ValueError):
        FootprintTracker(0.0)


# --- registry and config --------------------------------------------------------------------


def test_registered_and_not_a_baseline() -> None:
    assert "smetric-tiered" in known_policies()
    assert make_policy("smetric-tiered").name == "smetric-tiered"
    assert "smetric-tiered" not in BASELINE_POLICIES and "lmetric" in BASELINE_POLICIES


def test_tiered_mapping_keys() -> None:
    p = params_from_mapping(
        {
            "tiered": {
                "globalAware": False,
                "cost_aware_migration": False,
                "nodeLocal": True,
                "footprint": False,
                "nodeLocalFetchSPerToken": 2e-6,
                "footprintWindowS": 12.5,
            }
        }
    )
    assert p.get(SMetricTieredParams).tiered == TieredParams(
        global_aware=False,
        cost_aware_migration=False,
        node_local=True,
        footprint=False,
        node_local_fetch_s_per_token=2e-6,
        footprint_window_s=12.5,
    )
    assert params_from_mapping({}).get(SMetricTieredParams).tiered == TieredParams()


@pytest.mark.parametrize(
    ("mapping", "match"),
    [
        ({"tiered": {"bogus": True}}, "tiered.bogus"),
        ({"tiered": {"footprintWindowS": 0}}, "footprintWindowS|footprint_window_s"),
        ({"tiered": {"nodeLocalFetchSPerToken": -1.0}}, "nodeLocalFetchSPerToken|node_local"),
        ({"tiered": {"globalAware": "yes"}}, "globalAware|global_aware"),
        ({"tiered": 3}, "tiered"),
    ],
)
def test_bad_tiered_values_name_the_key(mapping: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        params_from_mapping(mapping)


def test_without_rejects_unknown_mechanism() -> None:
    with pytest.raises(ValueError, match="unknown mechanisms"):
        TieredParams().without("prefetch")
    with pytest.raises(ValueError):
        TieredParams(footprint_window_s=float("nan"))


def test_with_tier_facts_copies_every_other_field() -> None:
    import dataclasses

    from smetric.policy.smetric_tiered import with_tier_facts

    values = {
        f.name: f"x{i}" if f.type in ("str",) else i + 1
        for i, f in enumerate(dataclasses.fields(EndpointSnapshot))
    }
    s = EndpointSnapshot(**values)  # type: ignore[arg-type]
    assert with_tier_facts(s, 7, "n9", 3.5) == replace(
        s, global_hit_tokens=7, node="n9", session_kv_tokens=3.5
    )
