"""The picker's feedback hooks (smetric.epp.server.feedback.PickerFeedback) with exact values:
which endpoints of a pick's list a response counts against, what it ejects and returns, the
learned speed it forgets, and the cost a TTFT sample is credited with (what the mutation run of
``epp.server.feedback`` checks)."""

from __future__ import annotations

from dataclasses import dataclass, field

from smetric.core.costmodel import CostModel
from smetric.epp.parse.usage import Usage
from smetric.epp.server.decide import Pick
from smetric.epp.server.feedback import PickerFeedback
from smetric.router import RouterCore

A, B, C, D = "10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"
COST = CostModel(c_lin_s=1e-4, c_att_s=1e-9)


@dataclass
class Recorder:
    """An outlier detector that records each call; ``eject`` names the endpoints whose error ejects."""

    eject: set[str] = field(default_factory=set)
    calls: list[tuple[str, str, float]] = field(default_factory=list)

    def failed(self, address: str, retry_after_s: float = 0.0) -> bool:
        self.calls.append(("failed", address, retry_after_s))
        return address in self.eject

    def succeeded(self, address: str) -> bool:
        self.calls.append(("ok", address, 0.0))
        return False


class Feedback(PickerFeedback):
    def __init__(self, recorder: Recorder | None) -> None:
        self.core = RouterCore(COST)
        self.outliers = recorder  # type: ignore[assignment]
        self.responses = None


def pick(prompt_tokens: int = 0, cost_s: float = 0.5) -> Pick:
    return Pick(A, (B, C), "r", "smetric", "", A, 0, 1000, cost_s, prompt_tokens)


def test_a_first_attempt_counts_its_status_against_the_destination() -> None:
    r = Recorder()
    assert Feedback(r).on_response(pick(), 200) == ()
    assert Feedback(r).on_response(pick(), 503, attempts=1, retry_after_s=7.0) == ()
    assert r.calls == [("ok", A, 0.0), ("failed", A, 7.0)]


def test_no_status_or_no_detector_counts_nothing() -> None:
    r = Recorder()
    assert Feedback(r).on_response(pick(), 0) == () and r.calls == []
    assert Feedback(r).on_response(pick(), -1, attempts=3) == () and r.calls == []
    assert Feedback(None).on_response(pick(), 503, attempts=2) == ()
    Feedback(r).on_response(pick(), 1)  # a status above 0 is counted (a success)
    assert r.calls == [("ok", A, 0.0)]


def test_the_attempt_count_names_who_failed_and_who_answered() -> None:
    r = Recorder()
    Feedback(r).on_response(pick(), 200, attempts=2)  # A failed, B answered
    assert r.calls == [("failed", A, 0.0), ("ok", B, 0.0)]
    r.calls.clear()
    Feedback(r).on_response(pick(), 429, attempts=3, retry_after_s=2.0)  # A, B failed, C answered 429
    assert r.calls == [("failed", A, 0.0), ("failed", B, 0.0), ("failed", C, 2.0)]
    r.calls.clear()
    Feedback(r).on_response(pick(), 200, attempts=4)  # past the list: the gateway's own fallback answered
    assert r.calls == [("failed", A, 0.0), ("failed", B, 0.0), ("failed", C, 0.0)]


def test_the_served_endpoint_wins_over_the_attempt_count() -> None:
    r = Recorder()
    Feedback(r).on_response(pick(), 200, served=C, attempts=2)  # served says C: A and B failed
    assert r.calls == [("failed", A, 0.0), ("failed", B, 0.0), ("ok", C, 0.0)]
    r.calls.clear()
    Feedback(r).on_response(pick(), 200, served=B)
    assert r.calls == [("failed", A, 0.0), ("ok", B, 0.0)]
    r.calls.clear()
    Feedback(r).on_response(pick(), 200, served=D, attempts=1)  # not in the list: counted as named
    assert r.calls == [("ok", D, 0.0)]
    r.calls.clear()
    Feedback(r).on_response(pick(), 200, served=A)
    assert r.calls == [("ok", A, 0.0)]


def test_ejections_are_returned_in_order_and_their_learned_speed_forgotten() -> None:
    r = Recorder(eject={A, C})
    fb = Feedback(r)
    for a in (A, B, C):
        for _ in range(8):
            fb.core.rates.observe(a, 4.0, 1.0)
    assert fb.on_response(pick(), 503, attempts=3) == (A, C)
    assert fb.core.rates.samples(A) == 0 and fb.core.rates.samples(C) == 0
    assert fb.core.rates.samples(B) == 8  # failed, not ejected: it keeps its speed
    assert Feedback(Recorder(eject={B})).on_response(pick(), 503, attempts=2) == (B,)
    assert Feedback(Recorder(eject={A, B})).on_response(pick(), 200, attempts=3) == (
        A,
        B,
    )  # both failed attempts
    assert Feedback(Recorder(eject={A})).on_response(pick(), 200, attempts=2) == (A,)


def test_the_sample_cost_uses_the_engines_cached_share() -> None:
    fb = Feedback(None)
    p = pick(prompt_tokens=10_000, cost_s=0.25)
    assert fb._observed_cost(p, None, prompt_known=True) == 0.25  # no usage: the decision's cost
    assert fb._observed_cost(p, Usage(8000, 10, 2000), prompt_known=False) == 0.25  # no prompt
    assert fb._observed_cost(pick(prompt_tokens=0), Usage(8000, 10, 2000), True) == 0.5
    assert fb._observed_cost(pick(prompt_tokens=-1), Usage(8000, 10, 2000), True) == 0.5
    assert fb._observed_cost(p, Usage(8000, 10, None), True) == 0.25  # cached share unknown
    assert fb._observed_cost(p, Usage(0, 10, 0), True) == 0.25  # no prompt tokens reported
    # a quarter cached: 7,500 of the decision's 10,000 tokens computed
    assert fb._observed_cost(p, Usage(8000, 10, 2000), True) == COST.cost(7500.0, 10_000)
    # cached larger than the prompt reads as all cached
    assert fb._observed_cost(p, Usage(8000, 10, 9000), True) == COST.cost(0.0, 10_000)
    assert fb._observed_cost(pick(prompt_tokens=1), Usage(2, 10, 1), True) == COST.cost(0.5, 1)
