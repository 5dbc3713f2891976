"""The tier-aware estimate: balance score, ``meets`` and the ledger charge the same work.

Cost model for readability: ``cost(n, L) = 1 ms * n`` (c_att = 0), fetch 10 us per token,
TTFT SLO 2 s flat. Each term of ``(q + cost(L - h, L)) / rate + (h - c) * fetch + qf`` gets its
own assertion; the literal forms stay reachable through the policy's flags.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from smetric.core.costmodel import CostModel
from smetric.core.slo import SloConfig
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import DecodeStepModel, PolicyParams
from smetric.policy.estimates import tier_time_tokens_s, tier_times_s
from smetric.policy.params import SessionParams, SMetricParams
from smetric.policy.smetric import SMetric
from smetric.policy.smetric_basic import SMetricBasic
from smetric.policy.smetric_slo_tokens import SMetricSloTokens
from smetric.router import dispatch_work

CM = CostModel(c_lin_s=0.001, c_att_s=0.0)
FETCH = 1e-5
P = PolicyParams(
    mode="disaggregated",
    slo=SloConfig(ttft_base_s=2.0, ttft_per_ktok_s=0.0, tpot_s=0.020),
    cost_model=CM,
    decode_step=DecodeStepModel(base_s=0.005, per_kv_token_s=1e-7),
    global_fetch_s_per_token=FETCH,
)


def ep(
    name: str, hit: int = 0, g: int = 0, q: float = 0.0, qf: float = 0.0, speed: float = 1.0
) -> EndpointSnapshot:
    return EndpointSnapshot(
        name=name,
        local_hit_tokens=hit,
        queued_prefill_cost=q,
        queued_prefill_tokens=q * 1000,
        prefill_speed=speed,
        global_hit_tokens=g,
        queued_fetch_s=qf,
        kv_capacity_tokens=200_000,
    )


def req(prompt: int, turn: int = 1, est_hit: int = 0) -> RequestView:
    return RequestView(request_id="r", prompt_tokens=prompt, turn=turn, est_hit_tokens=est_hit)


def t1(e: EndpointSnapshot, r: RequestView, fetch: float | None = FETCH, queued_fetch: bool = True) -> float:
    (t,) = tier_times_s(r, [e], CM, fetch, queued_fetch)
    return t


# --- the terms -----------------------------------------------------------------------------------


def test_compute_term_is_the_tokens_nobody_holds() -> None:
    r = req(10_000)
    assert t1(ep("a"), r) == pytest.approx(10.0)  # nothing held: 10k tokens computed
    assert t1(ep("a", hit=4_000), r) == pytest.approx(6.0)  # local hit not computed, not fetched
    # g = 9k: compute 1k (1 s) and fetch the 9k the endpoint does not hold (0.09 s)
    assert t1(ep("a", g=9_000), r) == pytest.approx(1.0 + 9_000 * FETCH)


def test_fetch_only_for_tokens_the_endpoint_does_not_hold() -> None:
    # the (h - c) * fetch form: 6k held locally, 9k in the tier -> only 3k fetched
    r = req(10_000)
    assert t1(ep("a", hit=6_000, g=9_000), r) == pytest.approx(1.0 + 3_000 * FETCH)
    # local hit above the tier's copy: nothing fetched, the local hit decides
    assert t1(ep("a", hit=9_500, g=9_000), r) == pytest.approx(0.5)
    # without a fetch rate the tier's tokens are still not computed (the ledger does the same)
    assert t1(ep("a", hit=6_000, g=9_000), r, fetch=None) == pytest.approx(1.0)


def test_queued_compute_and_prefill_speed() -> None:
    r = req(10_000)
    # queued and own compute both scale with the learned speed, the fetch does not
    assert t1(ep("a", g=9_000, q=3.0, speed=2.0), r) == pytest.approx((3.0 + 1.0) / 2.0 + 9_000 * FETCH)


def test_queued_fetch_is_added_and_can_be_switched_off() -> None:
    r = req(10_000)
    assert t1(ep("a", hit=10_000, qf=4.0), r) == pytest.approx(4.0)  # the engine stalls for it
    assert t1(ep("a", hit=10_000, qf=4.0), r, queued_fetch=False) == pytest.approx(0.0)


def test_hits_and_bad_values_are_clamped() -> None:
    r = req(1_000)
    assert t1(ep("a", hit=-5, g=5_000, q=float("nan"), qf=-1.0, speed=0.0), r) == pytest.approx(1_000 * FETCH)


def test_matches_what_the_ledger_charges() -> None:
    rng = random.Random(3)
    for _ in range(500):
        L = rng.randint(0, 50_000)
        c, g = rng.randint(-10, L + 10), rng.randint(-10, L + 10)
        q, qf, sp = rng.uniform(0, 5), rng.uniform(0, 3), rng.uniform(0.5, 2)
        w = dispatch_work(CM, L, c, g, FETCH)
        e = ep("a", hit=c, g=g, q=q, qf=qf, speed=sp)
        assert t1(e, req(L)) == pytest.approx((q + w.cost_s) / sp + w.fetch_s + qf)


def test_token_form_terms() -> None:
    r = req(10_000)
    e = ep("a", hit=6_000, g=9_000, q=2.0, qf=0.5)  # q_tokens = 2000
    expect = (2_000 + 1_000) * 0.001 + 3_000 * FETCH + 0.5
    assert tier_time_tokens_s(r, e, 0.001, FETCH) == pytest.approx(expect)
    assert tier_time_tokens_s(r, e, 0.001, FETCH, queued_fetch=False) == pytest.approx(expect - 0.5)


# --- the balance score -----------------------------------------------------------------------------


# an evicted 100k-token session (est_hit 99k, copy in the global tier): "hot" holds a partial
# prefix (50k) but has 30 s of queued work; "idle" holds nothing and has none
EVICTED = req(100_000, turn=5, est_hit=99_000)
EVICTED_EPS = [ep("hot", hit=30_000, g=99_000, q=30.0), ep("idle", g=99_000)]


def test_tier_balance_sends_an_evicted_session_to_the_idle_endpoint() -> None:
    d = SMetric(P).pick(EVICTED, EVICTED_EPS)
    assert (d.target, d.reason) == (1, "evicted")
    assert d.scores[1] == pytest.approx(1.0 + 99_000 * FETCH)  # 1k computed + 99k fetched
    assert d.scores[0] == pytest.approx(30.0 + 1.0 + 69_000 * FETCH)


def test_local_balance_sends_it_to_the_partial_prefix() -> None:
    # the literal score: hot = 30 + 70 s, idle = 100 s recompute -> the hot endpoint
    literal = P.with_own(SMetricParams(balance_estimate="local"))
    d = SMetric(literal).pick(EVICTED, EVICTED_EPS)
    assert (d.target, d.reason) == (0, "evicted")


def test_ablations_share_the_balance_score() -> None:
    assert SMetricBasic(P).pick(EVICTED, EVICTED_EPS).target == 1
    literal = P.with_own(SessionParams(balance_estimate="local"))
    assert SMetricBasic(literal).pick(EVICTED, EVICTED_EPS).target == 0


def test_queued_fetch_moves_a_first_turn() -> None:
    # equal compute queues; "a" has 5 s of queued loads it will stall for (nobody meets the SLO
    # here: the balance score decides with nobodyMeets stick, the engines' queues with least-loaded)
    eps = [ep("a", q=1.0, qf=5.0), ep("b", q=2.0)]
    stick = P.with_own(SMetricParams(nobody_meets="stick"))
    assert SMetric(stick).pick(req(1_000, turn=0), eps).target == 1
    no_qf = P.with_own(SMetricParams(queued_fetch=False, nobody_meets="stick"))
    assert SMetric(no_qf).pick(req(1_000, turn=0), eps).target == 0


# --- meets ---------------------------------------------------------------------------------------


CACHED = req(10_000, turn=3, est_hit=9_000)


def test_meets_counts_queued_fetch_on_prev() -> None:
    # prev holds the session (0.5 s of compute) but stalls 3 s for queued loads: it misses the
    # 2 s SLO and the session moves to "b", which loads it (1 s + 0.09 s)
    eps = [ep("prev", hit=9_500, g=9_000, qf=3.0), ep("b", g=9_000)]
    d = SMetric(P).pick(CACHED, eps)
    assert (d.target, d.reason) == (1, "migrate")
    no_qf = P.with_own(SMetricParams(queued_fetch=False))
    assert SMetric(no_qf).pick(CACHED, eps).reason == "stick"


def test_meets_local_form_ignores_the_tier() -> None:
    eps = [ep("prev", hit=9_500, g=9_000, q=2.0), ep("b", g=9_000)]
    assert SMetric(P).pick(CACHED, eps).reason == "migrate"
    local = P.with_own(SMetricParams(meets_estimate="local", balance_estimate="local"))
    assert SMetric(local).pick(CACHED, eps).reason == "stick"  # b would recompute 10k: nobody meets


def test_slo_tokens_meets_counts_queued_fetch() -> None:
    eps = [ep("prev", hit=9_500, g=9_000, qf=3.0), ep("b", g=9_000)]
    assert SMetricSloTokens(P).pick(CACHED, eps).reason == "migrate"
    no_qf = P.with_own(SMetricParams(queued_fetch=False))
    assert SMetricSloTokens(no_qf).pick(CACHED, eps).reason == "stick"


# --- nobody meets ----------------------------------------------------------------------------------


def test_nobody_meets_stick_or_argmin() -> None:
    # everyone is > 2 s: prev (5 s queued) and "b" (3 s queued + 1.09 s own)
    eps = [ep("prev", hit=9_500, g=9_000, q=5.0), ep("b", g=9_000, q=3.0)]
    assert SMetric(P).pick(CACHED, eps).target == 0  # stick (the default)
    argmin = P.with_own(SMetricParams(nobody_meets="argmin"))
    d = SMetric(argmin).pick(CACHED, eps)
    assert (d.target, d.reason) == (1, "migrate")
    # argmin landing on prev is a stick
    eps2 = [ep("prev", hit=9_500, g=9_000, q=3.0), ep("b", g=9_000, q=5.0)]
    assert SMetric(argmin).pick(CACHED, eps2).reason == "stick"


def test_literal_flags_reproduce_the_local_hit_policy_without_a_tier() -> None:
    # without a global tier (g = 0, no queued fetch) the tier and local forms decide alike
    rng = random.Random(11)
    no_tier = replace(P, global_fetch_s_per_token=None)
    literal = no_tier.with_own(SMetricParams(balance_estimate="local", meets_estimate="local"))
    for mode in ("colocated", "disaggregated"):
        a = SMetric(replace(no_tier, mode=mode))
        b = SMetric(replace(literal, mode=mode))
        for _ in range(300):
            L = rng.randint(1, 5_000)
            r = req(L, turn=rng.choice([0, 2]), est_hit=rng.randint(0, L))
            eps = [ep(f"e{i}", hit=rng.randint(0, L), q=rng.uniform(0, 3)) for i in range(rng.randint(1, 5))]
            da, db = a.pick(r, eps), b.pick(r, eps)
            assert (da.target, da.reason, da.scores) == (db.target, db.reason, db.scores)


def test_flags_are_validated_at_the_config_boundary() -> None:
    from smetric.policy.params_mapping import params_from_mapping

    p = params_from_mapping({"balanceEstimate": "local", "meetsEstimate": "session", "nobodyMeets": "argmin"})
    own = p.get(SMetricParams)
    assert (own.balance_estimate, own.meets_estimate, own.nobody_meets) == ("local", "session", "argmin")
    assert p.get(SessionParams).balance_estimate == "local"  # one key, every model that declares it
    for bad in ({"balanceEstimate": "session"}, {"nobodyMeets": "nobody"}, {"queuedFetch": "yes"}):
        with pytest.raises(ValueError, match="invalid policy parameters"):
            params_from_mapping(bad)
