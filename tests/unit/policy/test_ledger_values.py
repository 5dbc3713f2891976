"""The dispatch ledger and the work one dispatch charges, asserted value by value.

Each test pins one behaviour a mutation of ``smetric.router.work`` or ``smetric.router.ledger``
would change (docs/mutation.md): the exact fields of :class:`DispatchWork`, the clamps of bad
inputs, the ledger's replace/remove bookkeeping and its float-drift clamps.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from smetric.core.costmodel import CostModel
from smetric.core.views import RequestView
from smetric.router.ledger import DispatchLedger, LedgerEntry
from smetric.router.work import DispatchWork, dispatch_work, estimated_global_hit

# linear plus attention term, so a cost depends on both the computed tokens and the prompt length
CM = CostModel(c_lin_s=0.001, c_att_s=1e-6)


def test_dispatch_work_fields_with_a_global_hit_above_the_local_one() -> None:
    w = dispatch_work(CM, 1000, 200, 700, 0.01)
    assert w == DispatchWork(
        prompt_tokens=1000,
        local_hit_tokens=200,
        fetched_tokens=500,  # max(c, g) - c
        computed_tokens=300,  # L - max(c, g)
        cost_s=CM.cost(300, 1000),
        fetch_s=500 * 0.01,
    )
    assert w.cost_s == pytest.approx(0.001 * 300 + 1e-6 * 300 * (1000 - 150))


def test_dispatch_work_local_hit_above_the_global_one_fetches_nothing() -> None:
    w = dispatch_work(CM, 1000, 700, 200, 0.01)
    assert (w.local_hit_tokens, w.fetched_tokens, w.computed_tokens, w.fetch_s) == (700, 0, 300, 0.0)


def test_dispatch_work_default_has_no_global_tier() -> None:
    w = dispatch_work(CM, 1000, 0)
    assert (w.fetched_tokens, w.computed_tokens, w.fetch_s) == (0, 1000, 0.0)
    w = dispatch_work(CM, 1000, 0, 500)  # a global hit without a link speed: fetched at 0 s
    assert (w.fetched_tokens, w.computed_tokens, w.fetch_s) == (500, 500, 0.0)


@pytest.mark.parametrize("snapshot", [DispatchWork(1, 0, 0, 1, 0.1, 0.0), LedgerEntry("a", 1.0, 0.1)])
def test_work_and_ledger_entries_are_frozen_slotted_snapshots(snapshot: object) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        snapshot.cost_s = 0.0  # type: ignore[attr-defined]
    assert not hasattr(snapshot, "__dict__")


def test_ledger_entry_defaults_to_no_fetch() -> None:
    assert LedgerEntry("a", 1.0, 0.1).fetch_s == 0.0
    led = DispatchLedger()
    led.add("r", "a", 1.0, 0.1)
    assert led.remove("r") == LedgerEntry("a", 1.0, 0.1, 0.0)


@pytest.mark.parametrize("fetch", [None, math.nan, math.inf, -0.5])
def test_unusable_fetch_speed_counts_fetched_tokens_at_zero_seconds(fetch: float | None) -> None:
    w = dispatch_work(CM, 1000, 0, 600, fetch)
    assert (w.fetched_tokens, w.computed_tokens, w.fetch_s) == (600, 400, 0.0)


def test_dispatch_work_clamps_bad_counts() -> None:
    assert dispatch_work(CM, 100, 250, 0, 0.01).local_hit_tokens == 100  # hit above the prompt
    assert dispatch_work(CM, 100, 0, 250, 0.01).fetched_tokens == 100
    assert dispatch_work(CM, -5, 3, 3, 0.01) == DispatchWork(0, 0, 0, 0, 0.0, 0.0)
    for bad in (math.nan, math.inf, -math.inf, 0, -1):
        assert dispatch_work(CM, bad, 0).prompt_tokens == 0  # type: ignore[arg-type]
    assert dispatch_work(CM, 10.9, 0).prompt_tokens == 10  # type: ignore[arg-type]
    assert dispatch_work(CM, 1, 0).prompt_tokens == 1
    assert dispatch_work(CM, 2**63, 0).prompt_tokens == 2**62  # the documented upper clamp


def test_estimated_global_hit() -> None:
    follow_up = RequestView("r", prompt_tokens=1000, turn=1, est_hit_tokens=800)
    assert estimated_global_hit(follow_up, None) == 0
    assert estimated_global_hit(follow_up, 0.0) == 800  # a tier with a free link still holds it
    assert estimated_global_hit(RequestView("r", prompt_tokens=500, est_hit_tokens=800), 0.01) == 500
    assert estimated_global_hit(RequestView("r", prompt_tokens=500, est_hit_tokens=-3), 0.01) == 0
    assert estimated_global_hit(RequestView("r", prompt_tokens=-5, est_hit_tokens=30), 0.01) == 0


def test_ledger_add_remove_and_totals() -> None:
    led = DispatchLedger()
    led.add("r1", "a", 100.0, 0.5, 0.25)
    led.add("r2", "a", 50.0, 0.125)
    led.add("r3", "b", 10.0, 0.01)
    assert (led.queued_tokens("a"), led.queued_cost_s("a"), led.queued_fetch_s("a")) == (150.0, 0.625, 0.25)
    assert len(led) == 3
    tokens, cost = led.totals()
    assert (dict(tokens), dict(cost)) == ({"a": 150.0, "b": 10.0}, {"a": 0.625, "b": 0.01})
    assert dict(led.fetch_totals()) == {"a": 0.25}  # a dispatch without fetch adds no entry
    assert led.remove("r1") == LedgerEntry("a", 100.0, 0.5, 0.25)
    assert led.remove("r1") is None  # idempotent
    assert (led.queued_tokens("a"), led.queued_cost_s("a"), led.queued_fetch_s("a")) == (50.0, 0.125, 0.0)
    assert len(led) == 2
    assert (led.queued_tokens("zz"), led.queued_cost_s("zz"), led.queued_fetch_s("zz")) == (0.0, 0.0, 0.0)


def test_ledger_views_are_live_and_read_only() -> None:
    led = DispatchLedger()
    tokens, cost = led.totals()
    fetch = led.fetch_totals()
    led.add("r", "a", 1.0, 2.0, 3.0)
    assert (tokens["a"], cost["a"], fetch["a"]) == (1.0, 2.0, 3.0)
    with pytest.raises(TypeError):
        tokens["a"] = 0.0  # type: ignore[index]


def test_ledger_add_with_a_known_id_replaces_the_old_work() -> None:
    led = DispatchLedger()
    led.add("r", "a", 100.0, 1.0, 0.5)
    led.add("r", "b", 30.0, 0.25, 0.125)
    assert (led.queued_tokens("a"), led.queued_cost_s("a"), led.queued_fetch_s("a")) == (0.0, 0.0, 0.0)
    assert (led.queued_tokens("b"), led.queued_cost_s("b"), led.queued_fetch_s("b")) == (30.0, 0.25, 0.125)
    assert len(led) == 1


def test_ledger_keeps_small_real_remainders() -> None:
    led = DispatchLedger()
    led.add("small", "a", 1.0, 0.001, 0.001)
    led.add("big", "a", 1000.0, 5.0, 5.0)
    led.remove("big")
    assert led.queued_tokens("a") == pytest.approx(1.0)
    assert led.queued_cost_s("a") == pytest.approx(0.001)
    assert led.queued_fetch_s("a") == pytest.approx(0.001)


def test_ledger_clamps_float_drift_at_and_below_its_epsilon() -> None:
    led = DispatchLedger()
    led.add("tiny", "a", 1e-6, 1e-12, 1e-12)
    led.add("other", "a", 0.0, 0.0, 1e-13)
    led.remove("other")  # leaves exactly the epsilons, which read as idle
    assert (led.queued_tokens("a"), led.queued_cost_s("a"), led.queued_fetch_s("a")) == (0.0, 0.0, 0.0)
    led.add("drift", "b", 0.1, 0.1, 0.1)
    led.add("drift2", "b", 0.2, 0.2, 0.2)
    led.remove("drift2")
    led.remove("drift")
    assert (led.queued_tokens("b"), led.queued_cost_s("b"), led.queued_fetch_s("b")) == (0.0, 0.0, 0.0)
