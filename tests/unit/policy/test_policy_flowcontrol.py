"""Flow control (smetric.policy.flowcontrol): the gate, the fair bounded queue, shedding."""

from __future__ import annotations

import math
from typing import Any

import pytest

from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import PolicyParams
from smetric.policy.flowcontrol import FairQueue, FlowControlConfig, FlowGate

PARAMS = PolicyParams()
REQ = RequestView("r", 8_000, turn=0)  # TTFT SLO 1 + 0.0625 * 8 = 1.5 s


def ep(name: str = "a", **kw: Any) -> EndpointSnapshot:
    return EndpointSnapshot(name, **kw)


def gate(**kw: object) -> FlowGate:
    return FlowGate(FlowControlConfig(enabled=True, **kw), PARAMS)  # type: ignore[arg-type]


def busy(seconds: float, **kw: Any) -> EndpointSnapshot:
    """An endpoint whose ledger holds ``seconds`` of queued prefill (cost-model seconds)."""
    return ep(queued_prefill_cost=seconds, queued_prefill_tokens=1_000.0, **kw)


def test_gate_admits_an_idle_endpoint_and_refuses_when_every_estimate_misses() -> None:
    g = gate()
    assert g.has_capacity(REQ, [ep()])
    assert not g.has_capacity(REQ, [busy(30.0), busy(40.0)])
    assert g.has_capacity(REQ, [busy(30.0), busy(0.01)])


def test_gate_counts_the_time_already_waited() -> None:
    g = gate()
    fresh = [busy(0.01)]  # estimate: 0.01 s queued + 1.41 s own prefill, SLO 1.5 s
    assert g.has_capacity(REQ, fresh, waited_s=0.0)
    assert not g.has_capacity(REQ, fresh, waited_s=0.5)


def test_gate_refuses_an_engine_with_a_queue_or_no_kv_room_even_when_the_estimate_meets() -> None:
    """The estimate sees only the router's ledger; past the knee the engine's own queue (KV full)
    is what makes requests miss (docs/overload.md)."""
    g = gate()
    assert not g.has_capacity(REQ, [ep(waiting=3)])
    assert not g.has_capacity(REQ, [ep(kv_usage=0.99, kv_capacity_tokens=200_000)])
    assert g.has_capacity(REQ, [ep(kv_usage=0.5, kv_capacity_tokens=200_000)])
    assert gate(max_engine_waiting=5).has_capacity(REQ, [ep(waiting=3)])
    assert gate(kv_headroom=False).has_capacity(REQ, [ep(kv_usage=0.99, kv_capacity_tokens=200_000)])


def test_gate_ignores_stale_endpoints() -> None:
    assert not gate().has_capacity(REQ, [ep(stale=True)])
    # a stale endpoint beside a fresh busy one: the request waits for capacity
    assert gate().candidates(REQ, [ep(stale=True), busy(30.0)]) is None


def test_with_every_endpoint_stale_the_gate_holds_nothing() -> None:
    """Every endpoint ejected for errors or without a fresh scrape: no capacity to wait for, so
    the gate passes the request on (the path without flow control: the engine's own answer)
    instead of a 429 that blames load; a hopeless request is not held either."""
    stale = [ep(stale=True), busy(30.0, stale=True)]
    long_req = RequestView("r", 40_000, turn=0)
    g = gate()
    assert g.candidates(REQ, stale) is stale
    assert g.candidates(long_req, stale) is stale and not g.hopeless(long_req, stale)
    assert not g.has_capacity(REQ, stale)  # the per-endpoint verdict is unchanged


def test_config_rejects_bad_values_with_a_clear_error() -> None:
    with pytest.raises(ValueError, match="max_queued"):
        FlowControlConfig(max_queued=0)
    with pytest.raises(ValueError, match="ttl_s"):
        FlowControlConfig(ttl_s=float("nan"))
    with pytest.raises(ValueError, match="slack"):
        FlowControlConfig(slack=0)


def test_queue_is_bounded() -> None:
    q: FairQueue[int] = FairQueue(2)
    assert q.push(1, "a", 0, 0.0, 10.0)
    assert q.push(2, "a", 0, 0.0, 10.0)
    assert not q.push(3, "b", 0, 0.0, 10.0)
    assert len(q) == 2


def test_queue_serves_flows_round_robin_not_one_agents_burst_first() -> None:
    q: FairQueue[str] = FairQueue(100)
    for i in range(5):
        q.push(f"a{i}", "agent-a", 0, float(i), 100.0)
    q.push("b0", "agent-b", 0, 5.0, 100.0)
    q.push("c0", "agent-c", 0, 6.0, 100.0)
    served = []
    while len(q):
        item, flow, prio, _ = next(q.heads())
        assert q.pop(flow, prio) == item
        served.append(item)
    assert served[:3] == ["a0", "b0", "c0"]
    assert served[3:] == ["a1", "a2", "a3", "a4"]


def test_queue_serves_higher_priority_first() -> None:
    q: FairQueue[str] = FairQueue(10)
    q.push("low", "x", -1, 0.0, 100.0)
    q.push("normal", "y", 0, 1.0, 100.0)
    q.push("high", "z", 5, 2.0, 100.0)
    assert [h[0] for h in q.heads()] == ["high", "normal", "low"]


def test_queue_expires_what_waited_too_long_and_reports_why() -> None:
    q: FairQueue[str] = FairQueue(10)
    q.push("old", "a", 0, 0.0, 5.0, "deadline")
    q.push("young", "a", 0, 3.0, 33.0, "ttl")
    assert q.next_expiry_s() == 5.0
    assert q.expire(4.9) == []
    assert q.expire(5.0) == [("old", "deadline", 5.0)]
    assert len(q) == 1
    assert [h[0] for h in q.heads()] == ["young"]
    assert q.next_expiry_s() == 33.0


def test_expired_and_popped_items_are_gone_from_both_indexes() -> None:
    q: FairQueue[int] = FairQueue(10)
    for i in range(4):
        q.push(i, i % 2, 0, 0.0, 10.0 + i)
    item, flow, prio, _ = next(q.heads())
    q.pop(flow, prio)
    out = q.expire(100.0)
    assert sorted(x for x, _, _ in out) == [x for x in range(4) if x != item]
    assert len(q) == 0
    assert q.next_expiry_s() == float("inf")
    assert list(q.heads()) == []


def test_late_last_puts_a_resend_below_every_fresh_request_of_its_priority() -> None:
    g = gate(late_last=True)
    assert [g.band(0), g.band(0, late=True), g.band(-1), g.band(-1, late=True)] == [0, -1, -2, -3]
    off = gate(late_last=False)
    assert off.band(0, late=True) == off.band(0) == 0  # without late_last a resend is fresh


def test_expiry_is_the_ttl_or_the_deadline_whichever_comes_first() -> None:
    assert gate(ttl_s=2.0).expiry(REQ) == (1.5, "deadline")
    assert gate(ttl_s=1.0).expiry(REQ) == (1.0, "ttl")
    assert gate(ttl_s=9.0, shed_on_deadline=False).expiry(REQ) == (9.0, "ttl")


def test_tpot_guard_refuses_an_endpoint_whose_decodes_this_prefill_would_slow_past_the_slo() -> None:
    """An endpoint with no ledger queue (the gate's idle shortcut) but a big running batch: its
    decode step (PolicyParams' decode model over 150k KV tokens) plus this 1.41 s prefill within
    the 1.5 s SLO stretches the TPOT far past 20 ms; an engine with few decodes passes."""
    heavy = ep(running=40, kv_usage=0.75, kv_capacity_tokens=200_000)
    light = ep(running=1, kv_usage=0.01, kv_capacity_tokens=200_000)
    small = RequestView("s", 800, turn=0)  # SLO 1.05 s, prefill ~0.14 s
    assert gate(tpot_guard=False).has_capacity(REQ, [heavy])  # TTFT-only gate: idle ledger, room in KV
    assert not gate().has_capacity(REQ, [heavy])  # the guard is on by default
    assert gate(tpot_guard=True).has_capacity(small, [light])
    assert gate(tpot_guard=True).has_capacity(REQ, [ep()])  # no running decode: nothing to slow
    assert gate(tpot_guard=True).has_capacity(REQ, [heavy, ep()])


def test_queue_counts_what_waits_at_or_above_a_band() -> None:
    q: FairQueue[str] = FairQueue(10)
    assert q.waiting_at_or_above(0) == 0
    q.push("late", "a", -1, 0.0, 9.0)
    assert (q.waiting_at_or_above(0), q.waiting_at_or_above(-1)) == (0, 1)
    q.push("fresh", "b", 0, 0.0, 1.0)
    q.push("fresh2", "b", 0, 0.0, 9.0)
    assert (q.waiting_at_or_above(0), q.waiting_at_or_above(-1), q.waiting_at_or_above(1)) == (2, 3, 0)
    assert [item for item, *_ in q.expire(1.0)] == ["fresh"]
    assert q.waiting_at_or_above(0) == 1
    assert q.pop("b", 0) == "fresh2"
    assert (q.waiting_at_or_above(0), q.waiting_at_or_above(-1)) == (0, 1)
    assert q.pop("a", -1) == "late" and q.waiting_at_or_above(-1) == 0 and len(q) == 0


def test_capable_is_the_gates_verdict_per_endpoint_and_has_capacity_its_any() -> None:
    eps = [busy(30.0, name="a"), ep("b"), busy(0.01, name="c"), ep("d", waiting=3)]
    assert gate().capable(REQ, eps) == [False, True, True, False]
    assert gate().has_capacity(REQ, eps)
    assert gate().capable(REQ, [busy(30.0), ep(waiting=3)]) == [False, False]
    assert gate().capable(REQ, [ep("a"), ep("b")]) == [True, True]  # every candidate idle


def test_candidates_filter_only_with_filter_candidates() -> None:
    """Off (the default): the gate says whether, the policy sees every endpoint. On: the endpoints
    the gate refuses are marked stale, so the framework hides them from the policy."""
    eps = [busy(30.0, name="a"), ep("b"), busy(0.01, name="c")]
    assert gate().candidates(REQ, eps) is eps
    filtered = gate(filter_candidates=True).candidates(REQ, eps)
    assert filtered is not None
    assert [e.stale for e in filtered] == [True, False, False]
    assert [e.name for e in filtered] == ["a", "b", "c"] and filtered[1] is eps[1]
    assert gate(filter_candidates=True).candidates(REQ, [busy(30.0), busy(40.0)]) is None  # hold it
    everyone = [ep("a"), ep("b")]
    assert gate(filter_candidates=True).candidates(REQ, everyone) is everyone


def test_the_config_defaults_and_shed_reasons_are_exact() -> None:
    from typing import get_args

    from smetric.policy.flowcontrol import SHED_REASONS, ShedReason

    assert SHED_REASONS == ("capacity", "ttl", "deadline", "sessions") == get_args(ShedReason)
    c = FlowControlConfig()
    assert (c.enabled, c.max_queued, c.ttl_s, c.shed_on_deadline, c.retry_after_s, c.slack) == (
        True, 1024, 2.0, True, 5.0, 1.0,
    )  # fmt: skip
    assert (c.idle_queued_tokens, c.max_engine_waiting, c.kv_headroom, c.late_last, c.tpot_guard) == (
        0.0, 0, True, True, True,
    )  # fmt: skip
    assert c.filter_candidates is False
    assert (c.session_budget, c.session_kv_share, c.session_miss_share, c.session_window, c.session_idle_s) == (
        0, 0.0, 0.0, 20, 60.0,
    )  # fmt: skip


def test_config_validation_boundaries_and_message() -> None:
    import dataclasses

    FlowControlConfig(ttl_s=1e-9, retry_after_s=0.0, idle_queued_tokens=0.0, max_queued=1)
    for bad, what in (
        ({"ttl_s": 0.0}, "ttl_s must be > 0"),
        ({"ttl_s": math.inf}, "ttl_s must be > 0"),
        ({"retry_after_s": -0.5}, "retry_after_s must be >= 0"),
        ({"retry_after_s": math.inf}, "retry_after_s must be >= 0"),
        ({"idle_queued_tokens": math.inf}, "idle_queued_tokens must be >= 0"),
        ({"idle_queued_tokens": -1.0}, "idle_queued_tokens must be >= 0"),
        ({"slack": 0.0}, "slack must be > 0"),
        ({"max_queued": 0}, "max_queued must be >= 1"),
        ({"max_engine_waiting": -1}, "max_engine_waiting must be >= 0"),
    ):
        with pytest.raises(ValueError, match=f"^invalid flow control: {what}"):
            FlowControlConfig(**bad)
    with pytest.raises(
        ValueError, match=r"^invalid flow control: max_queued must be >= 1, got 0; slack must be > 0"
    ):
        FlowControlConfig(max_queued=0, slack=0.0)
    c = FlowControlConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.ttl_s = 3.0  # type: ignore[misc]
    assert not hasattr(c, "__dict__")  # slots


def test_gate_boundaries_expiry_band_and_left_time() -> None:
    from smetric.policy.flowcontrol import queue_band

    g = gate()
    assert g.band() == queue_band(0, False) == 0 and g.band(late=True) == -1
    assert gate(late_last=False).band(late=True) == 0  # late counts only with late_last
    assert g.band(1, True) == 1
    slo = g.deadline_s(REQ)  # 1.5 s
    assert g.expiry(REQ) == (slo, "deadline")  # the 1.5 s deadline comes before the 2 s TTL
    assert gate(ttl_s=slo).expiry(REQ) == (slo, "ttl")  # equal: the TTL's reason
    assert gate(ttl_s=slo + 0.01).expiry(REQ) == (slo, "deadline")
    assert gate(shed_on_deadline=False).expiry(REQ) == (2.0, "ttl")
    idle = ep()
    assert g.meets(REQ, [idle]) and not g.meets(REQ, [idle], waited_s=slo)  # no time left: no one meets
    assert g._meets_each(REQ, [idle, idle], slo) == [False, False]
    assert g._meets_each(REQ, [idle], slo, times=[0.0]) == [False]  # no time left, even for a zero estimate
    assert g._meets_each(REQ, [idle], slo - 0.5, times=[0.1]) == [True]  # half a second left
    assert g._meets_each(REQ, [idle, idle], 0.0, times=[slo, slo + 1e-9]) == [True, False]  # t <= left
    assert g._meets_each(REQ, [idle, ep(stale=True)], 0.0, times=[0.0, 0.0]) == [True, False]


def test_admissible_kv_headroom_boundaries() -> None:
    g = gate()
    n = REQ.prompt_tokens
    assert g.admissible(REQ, ep(kv_capacity_tokens=0))  # capacity unknown: no KV check
    assert not g.admissible(REQ, ep(kv_capacity_tokens=n, kv_usage=0.5))  # 4,000 tokens free < 8,000
    # more than the whole cache: no wait frees that much, the engine answers it (over its context)
    assert g.admissible(REQ, ep(kv_capacity_tokens=n - 1, kv_usage=1.0))
    assert not g.admissible(REQ, ep(kv_capacity_tokens=n, kv_usage=1.0))  # fits once the cache frees
    assert g.admissible(REQ, ep(kv_capacity_tokens=n, kv_usage=0.0))  # exactly fits
    assert not g.admissible(REQ, ep(kv_capacity_tokens=n, kv_usage=0.0, queued_prefill_tokens=1.0))
    assert g.admissible(
        REQ, ep(kv_capacity_tokens=n, kv_usage=0.0, queued_prefill_tokens=-5.0)
    )  # bad value: 0
    assert g.admissible(REQ, ep(kv_capacity_tokens=2 * n, kv_usage=0.5))
    assert not g.admissible(
        REQ, ep(kv_capacity_tokens=10 * n, kv_usage=1.5)
    )  # usage clamped to 1: nothing free
    assert g.admissible(REQ, ep(kv_capacity_tokens=n, kv_usage=-0.5))  # clamped to 0
    assert g.admissible(
        REQ, ep(kv_capacity_tokens=2000, kv_usage=0.5, local_hit_tokens=n - 1000)
    )  # cached part
    assert not g.admissible(REQ, ep(kv_capacity_tokens=2000, kv_usage=0.5, local_hit_tokens=n - 1001))
    assert g.admissible(
        REQ, ep(kv_capacity_tokens=1000, kv_usage=0.0, local_hit_tokens=2 * n)
    )  # hit > prompt: all
    assert not g.admissible(REQ, ep(kv_capacity_tokens=2 * n, kv_usage=0.6, local_hit_tokens=-5))  # bad: 0
    assert gate(kv_headroom=False).admissible(REQ, ep(kv_capacity_tokens=1, kv_usage=1.0))
    # usage above 1 reads as full, not as negative room: a fully cached request still fits
    assert g.admissible(REQ, ep(kv_capacity_tokens=10 * n, kv_usage=1.5, local_hit_tokens=n))


def test_capable_mixes_idle_and_meeting_endpoints() -> None:
    g = gate(tpot_guard=False)
    assert g.capable(REQ, [ep("idle"), busy(0.01, name="near")]) == [True, True]
    assert g.capable(REQ, [ep("idle"), busy(30.0, name="far")]) == [True, False]
    assert g.capable(REQ, [busy(30.0, name="far"), busy(0.01, name="near")]) == [False, True]
    assert gate(idle_queued_tokens=1_000.0).capable(REQ, [busy(30.0)]) == [True]  # idle by the bound


def test_fair_queue_bounds_defaults_ties_and_expiry() -> None:
    FairQueue[str](1)
    for bad in (0, -1):
        with pytest.raises(ValueError, match="max_queued must be >= 1"):
            FairQueue[str](bad)
    q = FairQueue[str](1)
    q.capacity = 1
    with pytest.raises(ValueError, match="max_queued must be >= 1"):
        q.capacity = 0
    q = FairQueue[str](8)
    assert q.push("a", "f1", 0, now_s=1.0, expires_s=5.0)  # default reason: the TTL's
    assert q.push("b", "f2", 0, now_s=2.0, expires_s=5.0, reason="deadline")
    assert q.push("c", "f3", 0, now_s=2.5, expires_s=5.0)
    # equal expiries leave in the order they were queued; waited = now - enqueued
    assert q.expire(6.0) == [("a", "ttl", 5.0), ("b", "deadline", 4.0), ("c", "ttl", 3.5)]
    assert len(q) == 0 and q.next_expiry_s() == math.inf
    q.push("d", "f1", 0, now_s=0.0, expires_s=3.0)
    q.push("e", "f2", 0, now_s=0.0, expires_s=4.0)
    assert q.pop("f1", 0) == "d"  # popped: it never expires later
    assert q.next_expiry_s() == 4.0
    assert q.expire(10.0) == [("e", "ttl", 10.0)]
    assert q.expire(11.0) == []


def test_hopeless_means_no_endpoint_could_serve_it_in_time_even_idle() -> None:
    # 8k tokens cost ~1.41 s on an idle endpoint against a 1.5 s SLO: not hopeless, however long the queues;
    # 40k tokens (SLO 3.5 s) cost far more than that even idle: hopeless, whatever the queues
    long_req = RequestView("r", 40_000, turn=0)
    assert PARAMS.cost_model.cost(40_000, 40_000) > PARAMS.slo.ttft_slo_s(40_000)
    on = gate(hopeless_last=True)
    assert not on.hopeless(REQ, [busy(30.0), busy(40.0)])
    assert on.hopeless(long_req, [ep(), ep("b")])
    # a cache that holds the prompt makes it servable in time
    assert not on.hopeless(long_req, [ep(local_hit_tokens=39_000)])
    # a stale endpoint does not count; the setting off: never hopeless
    assert on.hopeless(long_req, [ep(local_hit_tokens=39_000, stale=True), ep("b")])
    assert not gate(hopeless_last=False).hopeless(long_req, [ep()])
    assert gate().hopeless(long_req, [ep()])  # on by default


def test_cold_means_no_fresh_endpoint_or_the_tier_holds_the_share_of_its_prompt() -> None:
    on = gate(cold_last=True)  # cold_hit_share 0.5: 4k of REQ's 8k tokens
    assert on.cold(REQ, [ep(), ep("b", local_hit_tokens=3_999)])
    assert not on.cold(REQ, [ep(), ep("b", local_hit_tokens=4_000)])  # a GPU holds its session
    assert not on.cold(REQ, [ep(global_hit_tokens=6_000)])  # the tier can supply it
    assert on.cold(REQ, [ep(local_hit_tokens=8_000, stale=True), ep("b")])  # a stale one does not count
    assert not on.cold(REQ, [ep(stale=True)])  # nothing fresh: no capacity to wait for
    assert not gate(cold_last=True, cold_hit_share=0.25).cold(REQ, [ep(local_hit_tokens=2_000)])
    assert not gate().cold(REQ, [ep()])  # off by default
    # waits_last: either reason puts a first attempt in the late band
    assert on.waits_last(REQ, [ep()]) and not gate().waits_last(REQ, [ep()])
    with pytest.raises(ValueError, match="cold_hit_share"):
        FlowControlConfig(cold_hit_share=0.0)
