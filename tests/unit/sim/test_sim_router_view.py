"""The simulator's router view runs the picker's router core: the ledger charge with a global
tier (deployed and oracle views, and the legacy phantom-load charge), online prefill-rate
learning from first tokens, and the cost model fitted from profiled prefills."""

from __future__ import annotations

import math

import pytest

from smetric.core.presets import get_preset
from smetric.core.views import RequestView
from smetric.engine import EngineRequest
from smetric.engine.request import RequestTiming
from smetric.sim.calibrate import profile_samples, profiled_cost_model
from smetric.sim.simulator import SimConfig, build_cluster, policy_params
from smetric.sim.view import RouterView, make_router_view

P30 = get_preset("qwen3-30b-h20")
BT = 64
PREFIX_BLOCKS = 500  # 32,000 tokens
NEW_TOKENS = 2_048


def _request(key: int, blocks: int, extra_tokens: int = 0) -> EngineRequest:
    pieces = (
        ((0, blocks - 1),)
        if not extra_tokens
        else ((0, PREFIX_BLOCKS - 1), (10**9, 10**9 + blocks - PREFIX_BLOCKS - 1))
    )
    return EngineRequest(f"r{key}", blocks * BT + extra_tokens, 1, pieces, index=key)


def _views() -> tuple[dict[str, RouterView], list[object], float]:
    cfg = SimConfig(instances=2, global_tier="full")
    params = policy_params(cfg, P30, BT)
    fetch = params.global_fetch_s_per_token
    assert fetch is not None and fetch > 0
    views: dict[str, RouterView] = {}
    clusters = []
    for name, kind, legacy in (
        ("legacy", "oracle", True),
        ("oracle", "oracle", False),
        ("deployed", "deployed", False),
    ):
        cluster = build_cluster(cfg, P30, BT)
        # the previous turn ran on instance 0: its KV is in instance 0's GPU tier and, written
        # through, in the global tier
        first = _request(0, PREFIX_BLOCKS)
        cluster[0].submit(first, 0.0)
        while cluster[0].next_event_s() < math.inf:
            cluster[0].advance(cluster[0].next_event_s())
        views[name] = make_router_view(
            kind,
            cluster,
            P30.cost_model,
            lambda: profiled_cost_model(P30, BT),
            0.05,
            fetch,
            legacy_ledger=legacy,
        )
        clusters.append(cluster)
    return views, clusters, fetch


def test_ledger_charge_on_migration_per_view() -> None:
    views, _, fetch = _views()
    follow = _request(1, PREFIX_BLOCKS + NEW_TOKENS // BT)
    L = follow.prompt_tokens
    est_hit = PREFIX_BLOCKS * BT
    rview = RequestView("r1", L, turn=1, est_hit_tokens=est_hit)
    charged = {}
    for name, view in views.items():
        view.observe(100.0)
        hits, snaps = view.snapshots(follow, rview)
        assert hits[0] > 0 and hits[1] == 0
        view.dispatched(1, 1, rview, snaps[1], 100.0)  # the session migrates to instance 1
        charged[name] = (
            view.core.ledger.queued_cost_s("instance-1"),
            view.core.ledger.queued_fetch_s("instance-1"),
        )
    cm = P30.cost_model
    # legacy: the whole prompt charged as prefill (phantom load), no fetch
    assert charged["legacy"] == (pytest.approx(cm.cost(L, L)), 0.0)
    # oracle: g read from the global tier's content
    assert charged["oracle"][0] == pytest.approx(cm.cost(L - est_hit, L))
    assert charged["oracle"][1] == pytest.approx(est_hit * fetch)
    # deployed: g estimated as the picker does (the previous turn), cost model fitted
    fitted = views["deployed"].core.cost_model
    assert charged["deployed"][0] == pytest.approx(fitted.cost(L - est_hit, L))
    assert charged["deployed"][1] == pytest.approx(est_hit * fetch)
    assert charged["deployed"][0] < charged["legacy"][0] / 5
    for view in views.values():
        view.first_token(1, 101.0, None)
        assert view.core.ledger.queued_cost_s("instance-1") == 0.0 and len(view.core.ledger) == 0


def test_only_the_deployed_view_learns_prefill_rates() -> None:
    views, _, _ = _views()
    L = 8_000
    for name, view in views.items():
        view.observe(0.0)
        for k in range(8):
            rview = RequestView(f"q{k}", L)
            req = EngineRequest(
                f"q{k}", L, 1, ((10**6 * (k + 1), 10**6 * (k + 1) + L // BT - 1),), index=100 + k
            )
            _, snaps = view.snapshots(req, rview)
            view.dispatched(100 + k, 0, rview, snaps[0], 10.0 * k)
            cost = view.core.cost_model.cost(L, L)
            timing = RequestTiming(10.0 * k, 10.0 * k, 10.0 * k, 10.0 * k + 2 * cost, math.nan, 0, 0, L, 1)
            view.first_token(100 + k, 10.0 * k + 2 * cost, timing)
        learned = view.core.rates.speed("instance-0")
        if name == "deployed":
            assert learned == pytest.approx(0.5)
            view.observe(200.0)
            _, snaps = view.snapshots(req, rview)
            assert snaps[0].prefill_speed == pytest.approx(0.5) and snaps[1].prefill_speed == 1.0
        else:
            assert learned == 1.0 and view.core.rates.samples("instance-0") == 0


def test_scraped_gauges_are_fresh_and_lag_the_engine() -> None:
    views, clusters, _ = _views()
    view, cluster = views["deployed"], clusters[2]
    view.observe(50.0)
    req = _request(7, 100)
    _, before = view.snapshots(req, RequestView("r7", req.prompt_tokens))
    assert not any(s.stale for s in before) and before[1].running == 0
    cluster[1].submit(req, 50.01)
    view.changed(1)
    view.observe(50.02)  # same scrape tick: the router still sees the old gauges
    assert view.snapshots(req, RequestView("r7", req.prompt_tokens))[1][1].batch_size == 0
    view.observe(50.06)  # next tick: scraped
    assert view.snapshots(req, RequestView("r7", req.prompt_tokens))[1][1].batch_size == 1


def test_profiled_cost_model_is_fitted_from_observed_prefills() -> None:
    samples = profile_samples(P30, BT)
    assert len(samples) >= 10 and all(0 < n <= L and s > 0 for n, L, s in samples)
    # observed times include step overheads: never below the engine's pure compute
    assert all(s >= P30.cost_model.cost(n, L) for n, L, s in samples)
    fitted = profiled_cost_model(P30, BT)
    for n, L in ((2_000, 2_000), (30_000, 30_000), (2_000, 60_000)):
        assert fitted.cost(n, L) == pytest.approx(P30.cost_model.cost(n, L), rel=0.05)


def test_router_view_kind_is_checked() -> None:
    with pytest.raises(ValueError, match="router_view"):
        SimConfig(router_view="psychic")
    with pytest.raises(ValueError, match="router view"):
        make_router_view("psychic", [], P30.cost_model, lambda: P30.cost_model, 0.05, None)


def _sessions(families: int = 6, turns: int = 4) -> object:
    from smetric.sim.workload import prepare
    from tests.support.sim_synth import synthetic

    return prepare(synthetic(families=families, turns=turns, out_tokens=50), P30)


@pytest.mark.parametrize(("kind", "legacy"), [("deployed", False), ("oracle", False), ("oracle", True)])
def test_simulate_runs_each_router_view_deterministically(kind: str, legacy: bool) -> None:
    from smetric.sim.simulator import simulate

    work = _sessions()
    cfg = SimConfig(
        instances=3, warmup_s=0.0, measure_s=300.0, seed=1, router_view=kind, legacy_ledger=legacy
    )
    a = simulate(work, "smetric", 0.05, cfg)  # type: ignore[arg-type]
    b = simulate(work, "smetric", 0.05, cfg)  # type: ignore[arg-type]
    assert a.metrics == b.metrics and a.reasons == b.reasons
    assert a.metrics["requests_sent"] > 0 and a.metrics["tps_within_slo"] > 0
