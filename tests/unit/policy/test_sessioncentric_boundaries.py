"""The session-centric skeleton and SMetric's rule at their boundaries (docs/mutation.md).

Readable model: ``cost(n, L) = 1 ms * n``, TTFT SLO 1 s flat, TPOT SLO 20 ms. An endpoint meets
when ``q + (L - hit) / 1000 <= SLACK * 1 s``; each test puts a value exactly on the bound it checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from smetric.core.costmodel import CostModel
from smetric.core.slo import SloConfig
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import DecodeStepModel, PolicyParams
from smetric.policy.params import SMetricParams
from smetric.policy.sessioncentric import SessionCentric
from smetric.policy.smetric import SMetric

P = PolicyParams(
    mode="disaggregated",
    slo=SloConfig(ttft_base_s=1.0, ttft_per_ktok_s=0.0, tpot_s=0.020),
    cost_model=CostModel(c_lin_s=0.001, c_att_s=0.0),
    decode_step=DecodeStepModel(base_s=0.01, per_kv_token_s=0.0),
)
COLO = replace(P, mode="colocated")
FOLLOW_UP = RequestView("r", prompt_tokens=1000, turn=1, est_hit_tokens=400)


def ep(
    hit: int = 0, q: float = 0.0, running: int = 0, waiting: int = 0, g: int = 0, qf: float = 0.0
) -> EndpointSnapshot:
    return EndpointSnapshot(
        name="e",
        local_hit_tokens=hit,
        queued_prefill_cost=q,
        running=running,
        waiting=waiting,
        global_hit_tokens=g,
        queued_fetch_s=qf,
    )


def smetric(params: PolicyParams = P, **own: object) -> SMetric:
    return SMetric(params.with_own(SMetricParams(**own)))  # type: ignore[arg-type]


class NobodyEligible(SessionCentric):
    """A rule that admits no endpoint: the skeleton's own fallback decides."""

    def eligible(
        self, request: RequestView, endpoints: Sequence[EndpointSnapshot], prev: int, times_s: Sequence[float]
    ) -> list[bool] | None:
        return [False] * len(endpoints)


# ---- the skeleton -----------------------------------------------------------------------------


def test_skeleton_name_and_unconditional_stick() -> None:
    assert SessionCentric.name == "session-centric"
    d = SessionCentric(P).pick(FOLLOW_UP, [ep(), ep(hit=500, q=50.0)])
    assert (d.target, d.reason) == (1, "stick")


def test_nobody_eligible_sticks_by_default() -> None:
    d = NobodyEligible(P).pick(FOLLOW_UP, [ep(), ep(hit=500, q=5.0)])
    assert (d.target, d.reason) == (1, "stick")


def test_first_turn_balances_and_a_follow_up_does_not() -> None:
    eps = [ep(q=0.1), ep(hit=500, q=2.0)]
    first = SessionCentric(P).pick(replace(FOLLOW_UP, turn=0), eps)
    assert (first.target, first.reason) == (0, "balance")
    assert SessionCentric(P).pick(replace(FOLLOW_UP, turn=-1), eps).reason == "balance"
    assert SessionCentric(P).pick(FOLLOW_UP, eps).reason == "stick"


def test_cached_means_strictly_above_hit_ratio_times_est_hit() -> None:
    # HIT_RATIO 0.5 x est_hit 400 = 200: exactly 200 tokens on prev is not cached
    at = SessionCentric(P).pick(FOLLOW_UP, [ep(q=0.1), ep(hit=200, q=2.0)])
    assert (at.target, at.reason) == (0, "evicted")
    above = SessionCentric(P).pick(FOLLOW_UP, [ep(q=0.1), ep(hit=201, q=2.0)])
    assert (above.target, above.reason) == (1, "stick")
    no_est = SessionCentric(P).pick(replace(FOLLOW_UP, est_hit_tokens=-50), [ep(q=0.1), ep(hit=1, q=2.0)])
    assert no_est.reason == "stick"


def test_previous_endpoint_is_the_highest_hit_then_the_least_score() -> None:
    d = SessionCentric(P).pick(FOLLOW_UP, [ep(hit=300, q=0.5), ep(hit=300, q=0.1), ep(hit=250)])
    assert (d.target, d.reason) == (1, "stick")


def test_colocated_score_counts_running_and_waiting() -> None:
    d = SessionCentric(COLO).pick(
        replace(FOLLOW_UP, turn=0), [ep(q=0.1, running=1, waiting=2), ep(q=0.5, waiting=1), ep(q=0.2)]
    )
    # t * (b + 1): 1.1 * 4, 1.5 * 2, 1.2 * 1
    assert d.scores == pytest.approx((1.1 * 4, 1.5 * 2, 1.2))
    assert (d.target, d.reason) == (2, "balance")
    disagg = SessionCentric(P).pick(replace(FOLLOW_UP, turn=0), [ep(q=0.1, running=1, waiting=2), ep(q=0.5)])
    assert disagg.scores == pytest.approx((1.1, 1.5))


def test_balance_estimate_tier_counts_the_global_tier_and_local_does_not() -> None:
    p = replace(P, global_fetch_s_per_token=1e-4)
    eps = [ep(hit=100, g=600, qf=0.2), ep(hit=100)]
    tier = SMetric(p).balance_times_s(FOLLOW_UP, eps)
    assert tier == pytest.approx([0.4 + 500 * 1e-4 + 0.2, 0.9])
    local = smetric(p, balance_estimate="local").balance_times_s(FOLLOW_UP, eps)
    assert local == pytest.approx([0.9, 0.9])
    no_qf = smetric(p, queued_fetch=False).balance_times_s(FOLLOW_UP, eps)
    assert no_qf == pytest.approx([0.4 + 500 * 1e-4, 0.9])


# ---- SMetric's rule ---------------------------------------------------------------------------


def test_registered_name() -> None:
    assert SMetric.name == "smetric"


def test_meets_at_exactly_the_slo_keeps_the_session() -> None:
    # prev: 0.5 queued + 500 uncached tokens = exactly 1.0 s = the SLO; the other endpoint is faster
    eps = [ep(q=0.0), ep(hit=500, q=0.5)]
    d = SMetric(P).pick(FOLLOW_UP, eps)
    assert (d.target, d.reason) == (1, "stick")
    over = SMetric(P).pick(FOLLOW_UP, [ep(q=0.0), ep(hit=500, q=0.51)])
    assert (over.target, over.reason) == (0, "migrate")


def test_slack_scales_the_deadline() -> None:
    eps = [ep(q=0.0), ep(hit=500, q=1.0)]  # prev at 1.5 s
    assert SMetric(P).pick(FOLLOW_UP, eps).reason == "migrate"
    assert smetric(slack=1.5).pick(FOLLOW_UP, eps).reason == "stick"
    assert smetric(slack=1.49).pick(FOLLOW_UP, eps).reason == "migrate"


def test_migration_goes_to_the_least_score_among_those_that_meet() -> None:
    eps = [ep(q=0.05), ep(hit=500, q=5.0), ep(hit=100), ep(hit=300, q=0.25)]
    d = SMetric(P).pick(FOLLOW_UP, eps)
    assert (d.target, d.reason) == (2, "migrate")
    assert d.scores == pytest.approx((1.05, 5.5, 0.9, 0.95))
    # colocated: a lower score that misses the SLO (1.2 x 1) loses to one that meets (0.9 x 2)
    colo = SMetric(COLO).pick(FOLLOW_UP, [ep(q=0.2), ep(hit=500, q=5.0), ep(hit=100, waiting=1)])
    assert (colo.target, colo.reason) == (2, "migrate")
    assert colo.scores == pytest.approx((1.2, 5.5, 1.8))


def test_nobody_meets_stick_or_argmin() -> None:
    eps = [ep(q=3.0), ep(hit=500, q=5.0), ep(q=2.0)]
    stick = SMetric(P).pick(FOLLOW_UP, eps)
    assert (stick.target, stick.reason) == (1, "stick")
    argmin = smetric(nobody_meets="argmin").pick(FOLLOW_UP, eps)
    assert (argmin.target, argmin.reason) == (2, "migrate")
    prev_is_least = smetric(nobody_meets="argmin").pick(FOLLOW_UP, [ep(q=9.0), ep(hit=500, q=2.0)])
    assert (prev_is_least.target, prev_is_least.reason) == (1, "stick")


TIER = replace(P, global_fetch_s_per_token=0.001)  # a pool with a global tier: 1 ms per loaded token


def test_nobody_meets_least_loaded_spreads_what_can_move_by_the_engines_queues() -> None:
    # nobody meets (every estimate over 1 s) and the tier holds the session (g 1000 > 0.5 x 400):
    # the least 4 x waiting + running wins, whatever the estimates say
    eps = [
        ep(q=3.0, waiting=2, g=1000),
        ep(hit=500, q=5.0, running=3, g=1000),
        ep(q=2.0, waiting=1, running=1, g=1000),
    ]
    ll = smetric(TIER, nobody_meets="least-loaded")
    d = ll.pick(FOLLOW_UP, eps)
    assert (d.target, d.reason, d.scores) == (1, "stick", (8.0, 3.0, 5.0))  # prev is the least loaded
    eps[1] = ep(hit=500, q=5.0, running=9, g=1000)
    d = ll.pick(FOLLOW_UP, eps)
    assert (d.target, d.reason, d.scores) == (2, "migrate", (8.0, 9.0, 5.0))
    eps[2] = ep(q=2.0, waiting=3, g=1000)
    assert ll.pick(replace(FOLLOW_UP, turn=0), eps).target == 0  # 8 < 9 < 12, not the least estimate (2)
    evicted = ll.pick(replace(FOLLOW_UP, est_hit_tokens=1500), eps)
    assert (evicted.target, evicted.reason) == (0, "evicted")  # g 1000 > 0.5 x 1500: movable


def test_least_loaded_keeps_what_would_be_recomputed_and_what_meets() -> None:
    busy_prev = [ep(q=3.0), ep(hit=500, q=5.0, running=9), ep(q=2.0, waiting=1)]
    # no global tier: moving recomputes, so the follow-up sticks as with nobodyMeets: stick
    assert smetric(P, nobody_meets="least-loaded").pick(FOLLOW_UP, busy_prev).target == 1
    # a tier that does not hold the session (g 100 <= 0.5 x 400): it sticks too
    no_copy = [replace(e, global_hit_tokens=100) for e in busy_prev]
    assert smetric(TIER, nobody_meets="least-loaded").pick(FOLLOW_UP, no_copy).target == 1
    # somebody meets: SMetric's rule, not the queues (endpoint 2: 0.1 + 700 x 1 ms = 0.8 s <= 1 s)
    eps = [ep(q=3.0), ep(hit=500, q=5.0), ep(hit=300, q=0.1, waiting=5)]
    d = smetric(TIER, nobody_meets="least-loaded").pick(FOLLOW_UP, eps)
    assert (d.target, d.reason) == (2, "migrate")


def test_colocated_needs_both_the_ttft_and_the_tpot_guard() -> None:
    # prev meets TTFT (0.5 s) but its running decodes would miss TPOT: step 10 ms / (1 - 0.5/1)
    # = 20 ms is exactly the SLO (passes); with a 19.9 ms TPOT SLO it fails and the session moves
    eps = [ep(q=0.0), ep(hit=500, running=4)]
    assert SMetric(COLO).pick(FOLLOW_UP, eps).reason == "stick"
    tight = replace(COLO, slo=replace(COLO.slo, tpot_s=0.0199))
    d = SMetric(tight).pick(FOLLOW_UP, eps)
    assert (d.target, d.reason) == (0, "migrate")
    # disaggregated pools have no decodes to protect: the same endpoints stick
    assert SMetric(replace(P, slo=tight.slo)).pick(FOLLOW_UP, eps).reason == "stick"
    # and a TTFT miss is not rescued by a passing TPOT guard
    late = SMetric(COLO).pick(FOLLOW_UP, [ep(q=0.0), ep(hit=500, q=0.6)])
    assert (late.target, late.reason) == (0, "migrate")


def test_request_slo_overrides_the_deadline() -> None:
    eps = [ep(q=0.0), ep(hit=500, q=1.0)]
    assert SMetric(P).pick(replace(FOLLOW_UP, ttft_slo_s=1.5), eps).reason == "stick"


def test_meets_estimates() -> None:
    p = replace(P, global_fetch_s_per_token=1e-4)
    req = replace(FOLLOW_UP, est_hit_tokens=800)
    eps = [ep(hit=100, g=600, qf=0.2), ep(hit=100)]
    balance = SMetric(p).balance_times_s(req, eps)
    tier = [0.4 + 500 * 1e-4 + 0.2, 0.9]
    assert SMetric(p)._meets_times_s(req, eps, balance) == pytest.approx(tier)
    local_balance = smetric(p, balance_estimate="local")
    assert local_balance._meets_times_s(req, eps, [7.0, 7.0]) == pytest.approx(tier)
    session = smetric(p, meets_estimate="session")
    # h = max(c, est_hit) = 800 on both: compute 200, fetch 700 (no queued fetch)
    assert session._meets_times_s(req, eps, balance) == pytest.approx([0.2 + 700 * 1e-4] * 2)
    session_no_tier = smetric(P, meets_estimate="session")
    assert session_no_tier._meets_times_s(req, eps, [7.0, 7.0]) == pytest.approx([0.9, 0.9])
    local = smetric(p, meets_estimate="local")
    assert local._meets_times_s(req, eps, balance) == pytest.approx([0.9, 0.9])
    both_local = smetric(p, meets_estimate="local", balance_estimate="local")
    assert both_local._meets_times_s(req, eps, [7.0, 8.0]) == [7.0, 8.0]


# ---- the least-loaded fallback's own boundaries (survivors of the mutation run) -------------------


class Recording(SessionCentric):
    """A rule with the least-loaded fallback on that records what the skeleton asks it."""

    def __init__(self, params: PolicyParams, answer: list[bool] | None) -> None:
        super().__init__(params)
        self._nobody_least_loaded = True
        self.answer = answer
        self.asked: list[int] = []

    def eligible(
        self, request: RequestView, endpoints: Sequence[EndpointSnapshot], prev: int, times_s: Sequence[float]
    ) -> list[bool] | None:
        self.asked.append(prev)
        return None if self.answer is None else list(self.answer)


MOVABLE = [ep(q=3.0, waiting=2, g=1000), ep(hit=500, q=5.0, running=9, g=1000), ep(q=2.0, waiting=1, g=1000)]


def test_the_skeleton_keeps_the_fallback_off_unless_a_rule_turns_it_on() -> None:
    # a movable follow-up (the tier holds it) that nobody admits: the skeleton sticks, as without a tier
    d = NobodyEligible(TIER).pick(FOLLOW_UP, MOVABLE)
    assert (d.target, d.reason) == (1, "stick")


def test_the_fallback_asks_the_rule_before_any_session_is_known() -> None:
    rule = Recording(TIER, [False, False, False])
    d = rule.pick(FOLLOW_UP, MOVABLE)
    assert rule.asked == [-1]  # no previous endpoint yet (prev = -1)
    assert (d.target, d.reason, d.scores) == (
        2,
        "migrate",
        (8.0, 9.0, 4.0),
    )  # the least 4 x waiting + running


def test_the_fallback_needs_an_answer_and_a_refusal_by_everyone() -> None:
    # unconditional stick (no answer) and an admitted endpoint both leave the fallback out
    unconditional = Recording(TIER, None).pick(FOLLOW_UP, MOVABLE)
    assert (unconditional.target, unconditional.reason) == (1, "stick")
    admits_prev = Recording(TIER, [False, True, False]).pick(FOLLOW_UP, MOVABLE)
    assert (admits_prev.target, admits_prev.reason) == (1, "stick")
    admits_other = Recording(TIER, [True, False, False]).pick(FOLLOW_UP, MOVABLE)
    assert (admits_other.target, admits_other.reason) == (0, "migrate")  # the rule's, not the queues' (2)


def test_the_fallbacks_reasons_for_a_first_turn_and_at_the_cached_bound() -> None:
    rule = Recording(TIER, [False, False, False])
    first = rule.pick(replace(FOLLOW_UP, turn=0), MOVABLE)
    assert (first.target, first.reason) == (2, "balance")
    # exactly HIT_RATIO x est_hit (0.5 x 400 = 200) on prev is not cached: evicted, not migrate
    at_bound = [
        ep(q=3.0, waiting=2, g=1000),
        ep(hit=200, q=5.0, running=9, g=1000),
        ep(q=2.0, waiting=1, g=1000),
    ]
    d = rule.pick(FOLLOW_UP, at_bound)
    assert (d.target, d.reason) == (2, "evicted")
    above = [
        ep(q=3.0, waiting=2, g=1000),
        ep(hit=201, q=5.0, running=9, g=1000),
        ep(q=2.0, waiting=1, g=1000),
    ]
    assert rule.pick(FOLLOW_UP, above).reason == "migrate"
