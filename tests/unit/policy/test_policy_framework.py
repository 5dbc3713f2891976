"""Router framework: empty lists, stale endpoints, decision validation, fallbacks, on_dispatch."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import Decision, PolicyParams
from smetric.policy.framework import InvalidDecisionError, NoEndpointError, Router
from smetric.policy.lmetric import LMetric

REQ = RequestView(request_id="r1", prompt_tokens=100)


class Scripted:
    """A fake policy returning a fixed decision and recording what it saw."""

    name = "scripted"

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self.seen: list[str] = []
        self.dispatched: list[str] = []

    def pick(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> Decision:
        self.seen = [e.name for e in endpoints]
        return self.decision

    def on_dispatch(self, request: RequestView, endpoint: str) -> None:
        self.dispatched.append(endpoint)


def eps(*names: str, stale: str = "") -> list[EndpointSnapshot]:
    return [EndpointSnapshot(name=n, stale=n in stale.split(",")) for n in names]


def test_empty_endpoint_list_raises_typed_error() -> None:
    with pytest.raises(NoEndpointError, match="r1"):
        Router(LMetric(PolicyParams())).pick(REQ, [])


def test_stale_endpoints_hidden_while_a_fresh_one_exists() -> None:
    policy = Scripted(Decision(1, "balance", (0.5, 0.2)))
    d = Router(policy).pick(REQ, eps("a", "b", "c", stale="b"))
    assert policy.seen == ["a", "c"]
    assert d.target == 2  # index into the caller's list
    assert d.scores == (0.5, math.inf, 0.2)
    assert d.fallbacks == (0,)
    assert policy.dispatched == ["c"]


def test_all_stale_fallback_uses_all() -> None:
    policy = Scripted(Decision(1, "balance", (0.5, 0.2)))
    d = Router(policy).pick(REQ, eps("a", "b", stale="a,b"))
    assert policy.seen == ["a", "b"]
    assert d.target == 1


def test_real_policy_never_picks_stale() -> None:
    endpoints = [
        EndpointSnapshot(name="idle-but-stale", stale=True),
        EndpointSnapshot(name="busy", running=50),
    ]
    assert Router(LMetric(PolicyParams())).pick(REQ, endpoints).target == 1


@pytest.mark.parametrize(
    ("decision", "match"),
    [
        (Decision(3, "balance"), "target"),
        (Decision(-1, "balance"), "target"),
        (Decision(True, "balance"), "target"),
        (Decision(0, "because"), "reason"),
        (Decision(0, "balance", (1.0, 2.0)), "scores"),
        (Decision(0, "balance", (1.0, math.nan, 2.0)), "NaN"),
        (Decision(0, "balance", (math.inf, 1.0, 2.0)), "not finite"),
        (Decision(0, "balance", (), (0, 1)), "fallbacks"),
        (Decision(0, "balance", (), (1, 1)), "fallbacks"),
        (Decision(0, "balance", (), (5,)), "fallbacks"),
    ],
)
def test_invalid_decisions_are_rejected(decision: Decision, match: str) -> None:
    with pytest.raises(InvalidDecisionError, match=match):
        Router(Scripted(decision)).pick(REQ, eps("a", "b", "c"))


def test_fallbacks_by_ascending_score_without_target_or_inf() -> None:
    policy = Scripted(Decision(2, "balance", (3.0, math.inf, 0.5, 1.0, 3.0)))
    d = Router(policy).pick(REQ, eps("a", "b", "c", "d", "e"))
    assert d.fallbacks == (3, 0, 4)


def test_policy_fallbacks_are_kept_and_mapped() -> None:
    policy = Scripted(Decision(0, "stick", (), (1,)))
    d = Router(policy).pick(REQ, eps("a", "x", "b", stale="x"))
    assert (d.target, d.fallbacks) == (0, (2,))


def test_without_scores_fallbacks_cycle_after_target() -> None:
    d = Router(Scripted(Decision(1, "balance"))).pick(REQ, eps("a", "b", "c"))
    assert d.fallbacks == (2, 0)


def test_max_fallbacks_truncates() -> None:
    d = Router(Scripted(Decision(0, "balance")), max_fallbacks=1).pick(REQ, eps("a", "b", "c"))
    assert d.fallbacks == (1,)
    with pytest.raises(ValueError, match="max_fallbacks"):
        Router(Scripted(Decision(0, "balance")), max_fallbacks=-1)


def test_router_exposes_policy_name() -> None:
    assert Router(LMetric(PolicyParams())).name == "lmetric"
