"""LMetric baseline: (q_tokens + L - c) * (b + 1), first minimum."""

from __future__ import annotations

import pytest

from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import PolicyParams
from smetric.policy.lmetric import LMetric


def ep(name: str, hit: int = 0, q: float = 0.0, b: int = 0) -> EndpointSnapshot:
    return EndpointSnapshot(name=name, local_hit_tokens=hit, queued_prefill_tokens=q, running=b)


@pytest.mark.parametrize(
    ("endpoints", "target"),
    [
        ([ep("a", b=1), ep("b", b=0)], 1),  # 2000 vs 1000
        ([ep("a", hit=900, b=3), ep("b", b=0)], 0),  # 100*4 vs 1000*1
        ([ep("a", q=500), ep("b", hit=200, b=1)], 0),  # 1500 vs 800*2=1600
        ([ep("a", b=1), ep("b", b=1), ep("c", b=1)], 0),  # ties: first minimum
    ],
)
def test_lmetric_score(endpoints: list[EndpointSnapshot], target: int) -> None:
    d = LMetric(PolicyParams()).pick(RequestView("r", prompt_tokens=1000, turn=3), endpoints)
    assert (d.target, d.reason) == (target, "balance")


def test_lmetric_ties_stay_on_first_minimum() -> None:
    policy = LMetric(PolicyParams())
    picks = {policy.pick(RequestView("r", 10), [ep("a"), ep("b")]).target for _ in range(5)}
    assert picks == {0}
