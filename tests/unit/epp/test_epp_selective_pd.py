"""Selective P/D: llm-d's prefix-based decider rule, and the picker skipping the prefill hop when
the decode pod already holds most of the prompt (pdDisaggregation.nonCachedTokens)."""

from __future__ import annotations

import pytest

from smetric.core.names import ROLE_DECODE, ROLE_PREFILL
from smetric.core.views import RequestView
from smetric.epp.contracts import EndpointInfo
from smetric.epp.server.decide import Picker
from smetric.epp.server.static import StaticEndpointSource
from smetric.policy import PolicyParams
from smetric.policy.framework import Router
from smetric.policy.registry import make_policy
from smetric.policy.selective_pd import PdDecider, take_prefill_hop
from tests.support.epp_harness import FakeIndex

PREFILL = ("10.0.1.1:8000", "10.0.1.2:8000")
DECODE = ("10.0.2.1:8000", "10.0.2.2:8000")


def test_the_upstream_rule() -> None:
    assert take_prefill_hop(1000, 0, 16)  # nothing cached on the decode pod: disaggregate
    assert take_prefill_hop(1000, 984, 16)  # 16 uncached tokens: at the threshold, disaggregate
    assert not take_prefill_hop(1000, 985, 16)  # 15 uncached: the decode pod computes them
    assert not take_prefill_hop(10, 0, 16)  # a prompt shorter than the threshold never hops
    assert not take_prefill_hop(1000, 0, 0)  # 0 disables disaggregation (upstream's meaning)
    assert take_prefill_hop(1000, 1000, None)  # no decider: always disaggregated
    assert not take_prefill_hop(100, 500, 16)  # a hit longer than the prompt counts as the prompt
    with pytest.raises(ValueError, match="nonCachedTokens"):
        PdDecider(-1)


def _picker(non_cached: int | None) -> tuple[Picker, FakeIndex]:
    eps = [EndpointInfo(a, role=ROLE_PREFILL) for a in PREFILL] + [
        EndpointInfo(a, role=ROLE_DECODE) for a in DECODE
    ]
    index = FakeIndex()
    params = PolicyParams()
    picker = Picker(
        StaticEndpointSource(eps),
        index,
        Router(make_policy("smetric", params)),
        params.cost_model,
        pd_router=Router(make_policy("smetric", PolicyParams(mode="disaggregated"))),
        pd_decider=PdDecider(non_cached),
    )
    return picker, index


def _view(tokens: int, rid: str) -> RequestView:
    return RequestView(request_id=rid, prompt_tokens=tokens, turn=1, est_hit_tokens=0)


def test_the_hop_is_skipped_when_the_decode_pod_holds_the_prompt() -> None:
    picker, index = _picker(16)
    text = "x" * 4000  # 1000 tokens for the fake index
    index.hits = {DECODE[1]: 995}  # the session's previous turn was decoded there
    pick = picker.pick(_view(1000, "r1"), text, (), None)
    assert pick.destination == DECODE[1] and pick.prefill == ""  # no x-prefiller-host-port
    assert pick.ledger_address == DECODE[1] and pick.uncached_tokens == 5  # the decode pod computes 5


def test_the_hop_is_taken_when_the_decode_pod_misses() -> None:
    picker, index = _picker(16)
    index.hits = {DECODE[1]: 500}
    pick = picker.pick(_view(1000, "r1"), "x" * 4000, (), None)
    assert pick.prefill in PREFILL and pick.destination in DECODE
    assert pick.ledger_address == pick.prefill


def test_without_a_threshold_every_request_is_disaggregated() -> None:
    picker, index = _picker(None)
    index.hits = {DECODE[0]: 1000, DECODE[1]: 1000}
    pick = picker.pick(_view(1000, "r1"), "x" * 4000, (), None)
    assert pick.prefill in PREFILL


def test_the_config_and_the_llmd_decider_reach_the_picker() -> None:
    from smetric.epp.config import parse_config, policy_params
    from smetric.epp.server.app import build_picker

    cfg = parse_config(
        {"policy": {"name": "smetric"}, "pdDisaggregation": {"enabled": True, "nonCachedTokens": 16}}
    )
    picker = build_picker(cfg, policy_params(cfg), StaticEndpointSource(PREFILL), FakeIndex())
    assert picker.pd_decider == PdDecider(16)
    plain = parse_config({"pdDisaggregation": {"enabled": True}})
    assert (
        build_picker(plain, policy_params(plain), StaticEndpointSource(PREFILL), FakeIndex()).pd_decider
        is None
    )
