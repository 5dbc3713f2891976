"""Property tests (hypothesis) over every registered policy under the Router."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from smetric.core.names import REASONS
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy import PolicyParams, Router, make_policy
from smetric.policy.registry import ABLATION_POLICIES, POLICY_NAMES

MODES = ("colocated", "disaggregated")

endpoint = st.builds(
    EndpointSnapshot,
    name=st.text("abcdef", min_size=1, max_size=4),
    local_hit_tokens=st.integers(0, 40_000),
    queued_prefill_tokens=st.floats(0, 1e5),
    queued_prefill_cost=st.floats(0, 20),
    running=st.integers(0, 64),
    waiting=st.integers(0, 64),
    kv_usage=st.floats(0, 1),
    kv_capacity_tokens=st.integers(0, 500_000),
    prefill_speed=st.floats(0.2, 5),
    stale=st.booleans(),
)
request = st.builds(
    RequestView,
    request_id=st.just("r"),
    prompt_tokens=st.integers(0, 40_000),
    turn=st.integers(0, 5),
    est_hit_tokens=st.integers(0, 40_000),
    session_id=st.sampled_from([None, "s1", "s2"]),
)
pools = st.lists(endpoint, min_size=1, max_size=9)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(POLICY_NAMES), mode=st.sampled_from(MODES), req=request, eps=pools)
def test_target_is_a_candidate_and_decision_is_well_formed(
    name: str, mode: str, req: RequestView, eps: list[EndpointSnapshot]
) -> None:
    d = Router(make_policy(name, PolicyParams(mode=mode))).pick(req, eps)  # type: ignore[arg-type]
    assert 0 <= d.target < len(eps)
    assert d.reason in REASONS
    any_fresh = any(not e.stale for e in eps)
    if any_fresh:
        assert not eps[d.target].stale
        assert all(not eps[i].stale for i in d.fallbacks)
    assert d.target not in d.fallbacks


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(POLICY_NAMES), mode=st.sampled_from(MODES), req=request, eps=pools)
def test_deterministic_on_fresh_instances(
    name: str, mode: str, req: RequestView, eps: list[EndpointSnapshot]
) -> None:
    params = PolicyParams(mode=mode)  # type: ignore[arg-type]
    assert Router(make_policy(name, params)).pick(req, eps) == Router(make_policy(name, params)).pick(
        req, eps
    )


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(ABLATION_POLICIES), mode=st.sampled_from(MODES), req=request, eps=pools)
def test_session_centric_reasons_match_the_rule(
    name: str, mode: str, req: RequestView, eps: list[EndpointSnapshot]
) -> None:
    fresh = [e for e in eps if not e.stale] or eps
    d = make_policy(name, PolicyParams(mode=mode)).pick(req, fresh)  # type: ignore[arg-type]
    top = max(min(e.local_hit_tokens, req.prompt_tokens) for e in fresh)
    if req.turn == 0:
        assert d.reason == "balance"
    elif d.reason == "stick":
        assert min(fresh[d.target].local_hit_tokens, req.prompt_tokens) == top
    elif d.reason == "migrate":
        assert top > 0.5 * req.est_hit_tokens
    else:
        assert d.reason == "evicted"
        assert not top > 0.5 * req.est_hit_tokens


@settings(max_examples=150, deadline=None)
@given(mode=st.sampled_from(MODES), req=request, eps=pools)
def test_smetric_migration_lands_within_the_slo(
    mode: str, req: RequestView, eps: list[EndpointSnapshot]
) -> None:
    params = PolicyParams(mode=mode)  # type: ignore[arg-type]
    fresh = [e for e in eps if not e.stale] or eps
    d = make_policy("smetric", params).pick(req, fresh)
    if d.reason == "migrate":
        target = fresh[d.target]
        deadline_s = params.slo.ttft_slo_s(req.prompt_tokens)
        miss = max(0, req.prompt_tokens - min(target.local_hit_tokens, req.prompt_tokens))
        t = (
            target.queued_prefill_cost + params.cost_model.cost(miss, req.prompt_tokens)
        ) / target.prefill_speed
        assert t <= deadline_s
