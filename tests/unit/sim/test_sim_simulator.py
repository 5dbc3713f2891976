"""Cluster simulator on tiny synthetic traces: determinism, closed loop, drops, modes, balance."""

from __future__ import annotations

import math

import pytest

from smetric.core.presets import get_preset
from smetric.sim.simulator import SimConfig, simulate
from smetric.sim.workload import PreparedWorkload, prepare
from tests.support.sim_synth import synthetic

P30 = get_preset("qwen3-30b-h20")


def work(**kw: int | float | None) -> PreparedWorkload:
    return prepare(synthetic(**kw), P30)  # type: ignore[arg-type]


# cold arrivals: every family starts at t >= 0, so each sent session is complete (no warm-up here)
CFG = SimConfig(instances=4, warmup_s=0.0, measure_s=600.0, seed=3, arrivals="cold")


def prev_key(w: PreparedWorkload, key: int) -> int:
    """Key of the same clone's previous request of the session (-1 for a first turn)."""
    clone, i = divmod(key, len(w))
    p = int(w.prev[i])
    return -1 if p < 0 else clone * len(w) + p


def next_key(w: PreparedWorkload, key: int) -> int:
    clone, i = divmod(key, len(w))
    j = int(w.next[i])
    return -1 if j < 0 else clone * len(w) + j


def comparable(d: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in d.items() if k not in ("sim_wall_s", "events_per_s")}


def test_deterministic_for_a_seed() -> None:
    w = work()
    a = simulate(w, "smetric", 0.05, CFG).to_dict()
    b = simulate(w, "smetric", 0.05, CFG).to_dict()
    c = simulate(w, "smetric", 0.05, SimConfig(instances=4, warmup_s=0.0, measure_s=600.0, seed=4)).to_dict()
    assert comparable(a) == comparable(b)
    assert comparable(a) != comparable(c)


def test_closed_loop_sends_after_previous_completion_plus_think_time() -> None:
    w = work(think_s=7.0)
    res = simulate(w, "lmetric", 0.05, CFG, keep_records=True)
    recs = {r.key: r for r in res.records}
    assert len(recs) > len(w)  # 30 family arrivals over 6 trace families: clones
    for r in recs.values():
        prev = prev_key(w, r.key)
        if prev in recs:  # (a family started before t = 0 skips its turns due before 0)
            assert r.send_s >= recs[prev].finish_s + 7.0 - 1e-9
            assert r.send_s >= recs[prev].send_s
        assert r.first_token_s >= r.send_s
        assert r.finish_s >= r.first_token_s


def test_follow_ups_hit_the_cache_of_their_session() -> None:
    res = simulate(work(), "smetric", 0.02, CFG, keep_records=True)
    follow = [r for r in res.records if r.key % 5 != 0]
    assert all(r.local_hit_tokens + r.global_hit_tokens > 0 for r in follow)
    assert res.metrics["reuse_ratio"] > 0.5


def test_over_limit_requests_are_dropped_counted_and_their_session_continues() -> None:
    w = work(families=2, huge_turn=2)
    assert w.n_dropped == 2
    res = simulate(w, "round-robin", 0.05, CFG, keep_records=True)
    recs = {r.key: r for r in res.records}
    dropped = [r for r in recs.values() if r.dropped]
    assert dropped and all(r.key % len(w) % 5 == 2 for r in dropped)
    assert res.metrics["requests_dropped"] == len(dropped)
    assert all(r.instance == -1 and math.isnan(r.first_token_s) for r in dropped)
    followed = [d for d in dropped if next_key(w, d.key) in recs]  # next turn sent before the horizon
    assert followed
    for d in followed:
        nxt = recs[next_key(w, d.key)]
        assert nxt.send_s >= d.send_s + 5.0 - 1e-9  # the dropped turn "completes" at once
        assert not nxt.dropped and math.isfinite(nxt.finish_s)
    assert res.metrics["requests_served_in_window"] == len(recs) - len(dropped)


def test_disaggregated_mode_reports_prefill_tps_and_no_decode() -> None:
    w = work()
    cfg = SimConfig(instances=4, mode="disaggregated", warmup_s=0.0, measure_s=600.0, seed=3, arrivals="cold")
    res = simulate(w, "dynamo", 0.05, cfg, keep_records=True)
    m = res.metrics
    assert math.isnan(float(m["tps_within_slo"]))
    assert float(m["prefill_tps_within_slo"]) > 0
    assert math.isnan(float(m["tpot_p50_s"]))
    recs = {r.key: r for r in res.records}
    for r in recs.values():
        assert r.finish_s == r.first_token_s
        prev = prev_key(w, r.key)
        if prev >= 0:  # completion = first token + (out - 1) * TPOT SLO, then think time
            assert r.send_s >= recs[prev].first_token_s + 99 * P30.slo.tpot_s + 5.0 - 1e-9


def test_colocated_metrics_are_consistent() -> None:
    res = simulate(work(), "load-balance", 0.02, CFG)
    m = res.metrics
    assert 0 < float(m["slo_attainment"]) <= 1
    assert float(m["tps_within_slo"]) <= float(m["output_tps"]) + 1e-9
    assert float(m["reuse_ratio"]) == pytest.approx(
        float(m["local_hit_ratio"]) + float(m["global_hit_ratio"])
    )
    assert m["requests_dropped"] == 0
    assert res.events > 0 and res.families_per_s == 0.02


def test_load_balancing_is_more_balanced_than_random() -> None:
    w = work(families=40, turns=6, think_s=2.0)
    cfg = SimConfig(instances=4, warmup_s=0.0, measure_s=1_200.0, window_s=10.0, seed=1)
    lb = simulate(w, "load-balance", 0.2, cfg).metrics
    rnd = simulate(w, "random", 0.2, cfg).metrics
    assert float(lb["imbalance_mean"]) < float(rnd["imbalance_mean"])


def test_no_global_tier_means_no_global_hits() -> None:
    cfg = SimConfig(instances=4, warmup_s=0.0, measure_s=600.0, global_tier="none")
    res = simulate(work(), "round-robin", 0.05, cfg)
    assert res.metrics["global_hit_ratio"] == 0.0


def test_bad_config_rejected() -> None:
    with pytest.raises(ValueError):
        SimConfig(mode="pd")
    with pytest.raises(ValueError):
        SimConfig(instances=0)
    with pytest.raises(ValueError):
        simulate(work(), "smetric", 0.0, CFG)
    with pytest.raises(ValueError, match="unknown routing policy"):
        simulate(work(), "nope", 0.1, CFG)
