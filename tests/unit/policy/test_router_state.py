"""The router core shared by the picker and the simulator: the ledger charge
(computed tokens only), the ledger, staleness, saturation and the prefill-rate samples."""

from __future__ import annotations

import math

import pytest

from smetric.core.costmodel import CostModel
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.router import (
    DispatchLedger,
    RouterCore,
    Saturation,
    ScrapedGauges,
    dispatch_work,
    estimated_global_hit,
)

CM = CostModel.from_l_eq(1e-4, 6900.0)
FETCH = 2e-5  # s per token


@pytest.mark.parametrize(
    ("case", "L", "c", "g", "computed", "fetched"),
    [
        ("no hit", 10_000, 0, 0, 10_000, 0),
        ("local hit", 10_000, 8_000, 0, 2_000, 0),
        ("global hit", 10_000, 0, 8_000, 2_000, 8_000),
        ("local covers global", 10_000, 8_000, 6_000, 2_000, 0),
        ("partial: global beyond local", 10_000, 3_000, 8_000, 2_000, 5_000),
        ("partial local, no global", 10_000, 3_000, 0, 7_000, 0),
        ("whole prompt global", 10_000, 0, 10_000, 0, 10_000),
        ("hits clamped to the prompt", 10_000, 12_000, 15_000, 0, 0),
    ],
)
def test_dispatch_work_table(case: str, L: int, c: int, g: int, computed: int, fetched: int) -> None:
    w = dispatch_work(CM, L, c, g, FETCH)
    assert w.computed_tokens == computed and w.fetched_tokens == fetched, case
    assert w.local_hit_tokens == min(c, L)
    assert w.cost_s == pytest.approx(CM.cost(computed, L))
    assert w.fetch_s == pytest.approx(fetched * FETCH)


def test_global_hit_is_charged_as_fetch_not_prefill() -> None:
    """The issue's example: a 100k-token session moved to another endpoint."""
    L, prev = 102_000, 100_000
    old = CM.cost(L, L)  # the charge if the global tier's tokens counted as prefill
    w = dispatch_work(CM, L, 0, prev, FETCH)
    assert w.cost_s == pytest.approx(CM.cost(2_000, L)) and w.cost_s < old / 10
    assert w.fetch_s == pytest.approx(prev * FETCH)


def test_dispatch_work_sanitises_bad_inputs() -> None:
    w = dispatch_work(CM, 1000, -5, -1, float("nan"))
    assert (w.computed_tokens, w.fetched_tokens, w.fetch_s) == (1000, 0, 0.0)
    w = dispatch_work(CM, 1000, 0, 400, None)  # no fetch speed known: tokens still not computed
    assert (w.computed_tokens, w.fetched_tokens, w.fetch_s) == (600, 400, 0.0)
    w = dispatch_work(CM, -3, 10, 10, FETCH)
    assert (w.prompt_tokens, w.computed_tokens, w.cost_s) == (0, 0, 0.0)


def test_estimated_global_hit_needs_a_configured_tier() -> None:
    r = RequestView("r", prompt_tokens=5000, turn=2, est_hit_tokens=4000)
    assert estimated_global_hit(r, None) == 0
    assert estimated_global_hit(r, FETCH) == 4000
    assert estimated_global_hit(RequestView("r", 3000, est_hit_tokens=4000), 0.0) == 3000


def test_ledger_keeps_fetch_apart() -> None:
    ledger = DispatchLedger()
    ledger.add("r1", "a", 100, 0.5, 2.0)
    ledger.add("r2", "a", 50, 0.25)
    assert (ledger.queued_cost_s("a"), ledger.queued_fetch_s("a")) == (0.75, 2.0)
    ledger.remove("r1")
    assert (ledger.queued_cost_s("a"), ledger.queued_fetch_s("a"), ledger.queued_tokens("a")) == (
        0.25,
        0.0,
        50,
    )
    ledger.add(7, "b", 1, 0.1, 0.3)  # any hashable request key (the simulator uses ints)
    assert ledger.fetch_totals()["b"] == 0.3 and len(ledger) == 2


def _core(**kw: object) -> RouterCore:
    return RouterCore(CM, global_fetch_s_per_token=FETCH, **kw)  # type: ignore[arg-type]


def test_core_dispatch_charges_the_fixed_work_and_releases_once() -> None:
    core = _core()
    req = RequestView("r", prompt_tokens=10_000, turn=3, est_hit_tokens=8_000)
    gauges = {"a": ScrapedGauges(1, 0, 0.1, 1000, 0.0), "b": ScrapedGauges(0, 0, 0.0, 1000, 0.0)}
    snaps = core.snapshots(["a", "b"], {"a": 8_000}, gauges.get, 0.0, global_hit_tokens=core.global_hit(req))
    assert [s.global_hit_tokens for s in snaps] == [8_000, 8_000]
    wa, wb = core.work(req, snaps[0]), core.work(req, snaps[1])
    assert (wa.computed_tokens, wa.fetched_tokens) == (2_000, 0)
    assert (wb.computed_tokens, wb.fetched_tokens, wb.cost_s) == (2_000, 8_000, wa.cost_s)
    core.dispatch("r", "b", wb)
    s = core.snapshots(["b"], {}, gauges.get, 0.0)[0]
    assert s.queued_prefill_cost == pytest.approx(wb.cost_s) and s.queued_fetch_s == pytest.approx(
        8_000 * FETCH
    )
    assert s.queued_prefill_tokens == 2_000
    assert core.prefill_done("r") is not None and core.prefill_done("r") is None
    assert core.ledger.queued_cost_s("b") == 0.0


def test_core_without_a_global_tier_charges_the_local_miss() -> None:
    core = RouterCore(CM)
    req = RequestView("r", prompt_tokens=10_000, turn=3, est_hit_tokens=8_000)
    assert core.global_hit(req) == 0
    w = core.work(req, EndpointSnapshot("b"))
    assert w.computed_tokens == 10_000 and w.cost_s == pytest.approx(CM.cost(10_000, 10_000))


def test_core_staleness_and_saturation() -> None:
    core = _core(staleness_s=2.0, saturation=Saturation(queue_depth=2, kv_util=0.5))
    gauges = {
        "fresh": ScrapedGauges(1, 1, 0.2, 100, 9.0),
        "old": ScrapedGauges(0, 0, 0.0, 100, 6.0),
        "busy": ScrapedGauges(4, 3, 0.2, 100, 9.5),
        "full": ScrapedGauges(1, 0, 0.9, 100, 9.5),
    }
    names = ["fresh", "old", "busy", "full", "missing"]
    snaps = core.snapshots(names, {}, gauges.get, 10.0)
    assert [s.stale for s in snaps] == [False, True, False, False, True]
    assert [core.has_capacity(s) for s in snaps] == [True, False, False, False, False]
    shed = RequestView("x", 10, sheddable=True)
    assert not core.shed(shed, snaps) and core.shed(shed, snaps[1:])
    assert not core.shed(RequestView("y", 10), snaps[1:])  # only sheddable requests are shed
    # the source's own judgement replaces the age check
    again = core.snapshots(names, {}, gauges.get, 10.0, is_stale=lambda a: a == "fresh")
    assert [s.stale for s in again] == [True, False, False, False, True]
    # a scraper that reads every endpoint at once gives one scrape time for all
    assert [s.stale for s in core.snapshots(names, {}, gauges.get, 10.0, scraped_at_s=9.9)] == [
        False,
        False,
        False,
        False,
        True,
    ]
    assert all(s.stale for s in core.snapshots(names, {}, gauges.get, 10.0, scraped_at_s=7.0))


def test_core_learns_prefill_rate_from_computed_cost_only() -> None:
    core = _core()
    L = 20_000
    cost = core.observed_cost_s(L, cached_tokens=18_000)  # 18k of 20k came from a cache
    assert cost == pytest.approx(CM.cost(2_000, L))
    for _ in range(8):
        assert core.observe_first_token("a", cost, cost / 0.5)  # engine runs at half speed
    assert core.rates.speed("a") == pytest.approx(0.5)
    assert not core.observe_first_token("a", math.inf, 1.0)
    snap = core.snapshots(["a"], {}, {"a": ScrapedGauges(0, 0, 0.0, 1, 0.0)}.get, 0.0)[0]
    assert snap.prefill_speed == pytest.approx(0.5)
    assert core.observed_cost_s(100, -5) == pytest.approx(CM.cost(100, 100))
    assert core.observed_cost_s(100, 500) == 0.0


def test_picker_charges_the_ledger_through_the_core() -> None:
    """The picker's ledger charge is the shared function's: a follow-up sent to an endpoint
    without its session is charged its new tokens plus fetch time when a global tier is set."""
    from smetric.epp.server.decide import Picker
    from smetric.epp.server.static import StaticEndpointSource
    from smetric.policy.base import PolicyParams
    from smetric.policy.framework import Router
    from smetric.policy.registry import make_policy
    from tests.support.epp_harness import FakeIndex

    eps = ("10.0.0.1:8000", "10.0.0.2:8000")
    for fetch in (None, FETCH):
        index = FakeIndex()
        params = PolicyParams()
        picker = Picker(
            StaticEndpointSource(eps),
            index,
            Router(make_policy("round-robin", params)),
            CM,
            global_fetch_s_per_token=fetch,
        )
        req = RequestView("r1", prompt_tokens=10_000, turn=2, est_hit_tokens=8_000)
        pick = picker.pick(req, "x" * 40_000)
        expect = dispatch_work(CM, 10_000, 0, 0 if fetch is None else 8_000, fetch)
        assert (pick.uncached_tokens, pick.fetched_tokens) == (expect.computed_tokens, expect.fetched_tokens)
        assert picker.ledger.queued_cost_s(pick.destination) == pytest.approx(expect.cost_s)
        assert picker.ledger.queued_fetch_s(pick.destination) == pytest.approx(expect.fetch_s)
        assert picker.core.prefill_done("r1") is not None
