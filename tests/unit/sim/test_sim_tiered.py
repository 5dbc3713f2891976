"""smetric-tiered in the simulator: the tier view's facts, determinism, and all switches off ==
smetric run for run."""

from __future__ import annotations

from dataclasses import replace

import pytest

from smetric.core.presets import get_preset
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.tiered_params import MECHANISMS, SMetricTieredParams, TieredParams
from smetric.sim.simulator import SimConfig, build_cluster, simulate
from smetric.sim.tier_view import TierView
from tests.support.sim_synth import comparable, work

P30 = get_preset("qwen3-30b-h20")
CFG = SimConfig(instances=4, warmup_s=0.0, measure_s=600.0, seed=3)


def test_tier_view_reports_global_hit_nodes_and_footprint() -> None:
    w = work()
    cluster = build_cluster(replace(CFG, instances=10), P30, w.block_tokens)
    tv = TierView(cluster, w.block_tokens, footprint_window_s=30.0, hits="exact")  # the oracle
    req = w.engine_request(0, 0)
    snaps = [EndpointSnapshot(inst.name, kv_capacity_tokens=1000) for inst in cluster]
    out = tv.enrich(snaps, req, 0.0)
    assert [s.global_hit_tokens for s in out] == [0] * 10  # nothing written yet
    assert out[0].node == out[7].node != out[8].node  # 8 one-GPU instances per node
    assert cluster[0].global_tier is not None
    cluster[0].global_tier.write(req.prompt_pieces)
    view = RequestView("r", req.prompt_tokens)
    tv.dispatched(replace(out[2], local_hit_tokens=64), view, 0.0)
    out = tv.enrich(snaps, req, 0.0)
    assert all(s.global_hit_tokens == req.prompt_tokens for s in out)
    assert out[2].session_kv_tokens == req.prompt_tokens - 64 and out[3].session_kv_tokens == 0.0


def test_tier_view_estimate_knows_what_was_routed_not_what_the_tier_holds() -> None:
    # --tier-hits estimate (the default): the picker's write estimate without KV events (an LRU of
    # the routed prompts as large as the tier), not the simulated tier's content
    w = work()
    cluster = build_cluster(replace(CFG, instances=2, global_tier="small"), P30, w.block_tokens)
    tier = cluster[0].global_tier
    assert tier is not None and tier.capacity_blocks is not None
    tv = TierView(cluster, w.block_tokens, footprint_window_s=30.0, hits="estimate")
    req = w.engine_request(0, 0)
    snaps = [EndpointSnapshot(inst.name, kv_capacity_tokens=1000) for inst in cluster]
    tier.write(req.prompt_pieces)  # in the tier, but the picker never routed it
    assert [s.global_hit_tokens for s in tv.enrich(snaps, req, 0.0)] == [0, 0]
    tv.dispatched(snaps[0], RequestView("r", req.prompt_tokens), 0.0, req.prompt_pieces, req.prompt_tokens)
    assert all(s.global_hit_tokens == req.prompt_tokens for s in tv.enrich(snaps, req, 0.0))
    with pytest.raises(ValueError, match="tier_hits"):
        replace(CFG, tier_hits="oracle")


def test_tier_view_events_know_what_was_stored_but_not_what_was_removed() -> None:
    # --tier-hits events: the tier's store events without removals (LMCache's CacheStoreEvent), bounded
    # by the tier's capacity; a block the tier evicts still counts until the bound pushes it out
    w = work()
    cluster = build_cluster(replace(CFG, instances=2, global_tier="small"), P30, w.block_tokens)
    tier = cluster[0].global_tier
    assert tier is not None
    tv = TierView(cluster, w.block_tokens, footprint_window_s=30.0, hits="events")
    req, other = w.engine_request(0, 0), w.engine_request(1, 1)
    snaps = [EndpointSnapshot(inst.name, kv_capacity_tokens=1000) for inst in cluster]
    tier.write(other.prompt_pieces)  # an event arrived: events are the source from now on
    assert tv.model is not None and tv.model.from_events
    tv.dispatched(snaps[0], RequestView("r", req.prompt_tokens), 0.0, req.prompt_pieces, req.prompt_tokens)
    assert [s.global_hit_tokens for s in tv.enrich(snaps, req, 0.0)] == [0, 0]  # routed, not stored
    tier.write(req.prompt_pieces)  # the store event
    assert all(s.global_hit_tokens == req.prompt_tokens for s in tv.enrich(snaps, req, 0.0))


def test_runs_deterministically_and_serves_every_request() -> None:
    w = work()
    a = simulate(w, "smetric-tiered", 0.05, CFG).to_dict()
    b = simulate(w, "smetric-tiered", 0.05, CFG).to_dict()
    assert comparable(a) == comparable(b)
    assert a["requests_served_in_window"] == a["requests_in_window"]


def test_all_switches_off_reproduces_smetric_run_for_run() -> None:
    w = work()
    off = CFG.with_params(
        tiered=TieredParams().without(*MECHANISMS).model_dump(by_alias=True),
        # smetric's literal estimates (local-hit balance score, max(c, est_hit) meets)
        balanceEstimate="local",
        meetsEstimate="session",
    )
    a = simulate(w, "smetric", 0.08, off, keep_records=True)
    b = simulate(w, "smetric-tiered", 0.08, off, keep_records=True)
    assert a.records == b.records
    assert comparable(a.to_dict()) == comparable(b.to_dict())


def test_cli_tiered_off_switches_mechanisms() -> None:
    from smetric.sim.cli import _spec, parser

    spec = _spec(parser().parse_args(["--policies", "smetric-tiered", "--tiered-off", "footprint, global"]))
    (own,) = [m for m in spec.sim.own_params if isinstance(m, SMetricTieredParams)]
    assert own.tiered == TieredParams(global_aware=False, footprint=False)
    with pytest.raises(ValueError, match="unknown mechanisms"):
        _spec(parser().parse_args(["--tiered-off", "prefetch"]))


@pytest.mark.parametrize("tier", ["none", "small", "full"])
def test_the_policies_know_the_tiers_size_as_the_operator_renders_it(tier: str) -> None:
    # globalSegmentTokens x the instances is the simulated tier's capacity (the small tier), unset for a full one
    from smetric.sim.build import policy_params

    cfg = replace(CFG, global_tier=tier)
    preset = get_preset(cfg.preset)
    params = policy_params(cfg, preset, 16)
    cluster = build_cluster(cfg, preset, 16)
    if tier != "small":
        assert params.global_segment_tokens is None
        return
    tier_model = cluster[0].global_tier
    assert tier_model is not None and tier_model.capacity_blocks is not None
    seg = params.global_segment_tokens
    assert seg is not None
    assert 0 <= tier_model.capacity_blocks * 16 - seg * cfg.instances < cfg.instances
