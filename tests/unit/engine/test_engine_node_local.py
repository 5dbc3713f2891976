"""Global tier, node-local path: replicas placed in the writer node's segment are loaded over
PCIe, not over the NIC; the default placement keeps every load on the NIC."""

from __future__ import annotations

from dataclasses import replace

import pytest

from smetric.core.presets import PRESETS
from smetric.engine import GlobalTier
from smetric.engine.global_tier import CALIBRATED, GlobalPath
from smetric.engine.prefix_cache import BlockCache
from smetric.sim import simulator
from smetric.sim.simulator import SimConfig
from smetric.sim.workload import prepare
from tests.support.sim_synth import synthetic

P30 = PRESETS["qwen3-30b-h20"]
BLOCK_BYTES = 64 * P30.model.kv_bytes_per_token
NIC = 200e9 / 8
NODE = GlobalPath(placement="node")


def test_default_placement_is_spread_and_sim_default_unchanged() -> None:
    assert CALIBRATED.placement == "spread"
    assert SimConfig().global_path == CALIBRATED


def test_same_node_load_is_faster_than_cross_node_at_equal_bytes() -> None:
    tier = GlobalTier(None, BLOCK_BYTES, NIC, 2, NODE)
    session = [(1, 1_000)]
    tier.write(session, node=0, now_s=0.0)
    t0 = 100.0  # links idle again
    same = tier.load(0, 1_000, t0, session) - t0
    other = GlobalTier(None, BLOCK_BYTES, NIC, 2, NODE)
    other.write(session, node=0, now_s=0.0)
    cross = other.load(1, 1_000, t0, session) - t0
    assert same == pytest.approx(1_000 * BLOCK_BYTES / (NODE.node_local_gbit_s_per_gpu * 1e9 / 8))
    assert cross == pytest.approx(1_000 * BLOCK_BYTES / (NODE.load_gbit_s_per_gpu * 1e9 / 8))  # type: ignore[operator]
    assert same < cross
    assert tier.bytes_loaded_node_local == pytest.approx(1_000 * BLOCK_BYTES)
    assert other.bytes_loaded_node_local == 0.0


def test_node_local_load_leaves_the_nic_free() -> None:
    tier = GlobalTier(None, BLOCK_BYTES, NIC, 2, GlobalPath(placement="node", write_back=False))
    tier.write([(1, 1_000)], node=0)
    tier.load(0, 1_000, 0.0, [(1, 1_000)])
    assert tier.link_free_s(0) == 0.0
    tier.load(1, 1_000, 0.0, [(1, 1_000)])
    assert tier.link_free_s(1) > 0.0


def test_placement_is_tracked_per_node_first_writer_wins() -> None:
    tier = GlobalTier(None, BLOCK_BYTES, NIC, 3, NODE)
    tier.write([(1, 10)], node=0)
    tier.write([(1, 10), (11, 14)], node=1)  # 1..10 exist already: only 11..14 placed on node 1
    assert [tier.placed_blocks(n) for n in range(3)] == [10, 4, 0]
    assert tier.cached_blocks == 14


def test_mixed_load_splits_local_and_remote_bytes() -> None:
    tier = GlobalTier(None, BLOCK_BYTES, NIC, 2, NODE)
    tier.write([(1, 600)], node=0)
    tier.write([(601, 1_000)], node=1)
    tier.load(0, 1_000, 0.0, [(1, 1_000)])
    assert tier.bytes_loaded_node_local == pytest.approx(600 * BLOCK_BYTES)
    assert tier.bytes_loaded == pytest.approx(1_000 * BLOCK_BYTES)


def test_spread_placement_charges_every_load_to_the_nic() -> None:
    tier = GlobalTier(None, BLOCK_BYTES, NIC, 2, CALIBRATED)
    tier.write([(1, 1_000)], node=0)
    assert tier.placed_blocks(0) == 0
    tier.load(0, 1_000, 100.0, [(1, 1_000)])
    assert tier.bytes_loaded_node_local == 0.0


def test_segment_share_bounds_each_node_index() -> None:
    tier = GlobalTier(20, BLOCK_BYTES, NIC, 2, NODE)  # 10 blocks per node's segment
    tier.write([(1, 15)], node=0)
    assert tier.placed_blocks(0) == 10


def test_bad_placement_rejected() -> None:
    with pytest.raises(ValueError, match="placement"):
        GlobalPath(placement="nearby")
    with pytest.raises(ValueError, match="node-local"):
        GlobalPath(node_local_gbit_s_per_gpu=0.0)


def test_block_cache_counts_and_gaps() -> None:
    c = BlockCache(None)
    c.insert([(5, 9), (20, 24)])
    assert c.cached_count([(1, 30)]) == 10
    assert c.cached_count([(7, 21)]) == 5
    assert c.uncached([(1, 30)]) == [(1, 4), (10, 19), (25, 30)]
    assert c.uncached([(5, 9)]) == []


def test_simulated_cluster_reads_same_node_replicas_over_pcie() -> None:
    """End to end: round-robin moves every turn, so follow-ups load from the global tier; on one
    node every load is node-local with ``node`` placement and none is with ``spread``."""
    work = prepare(synthetic(), P30)
    tiers: list[GlobalTier] = []
    build = simulator.build_cluster

    def spy(cfg: SimConfig, preset: object, block_tokens: int) -> object:
        cluster = build(cfg, preset, block_tokens)  # type: ignore[arg-type]
        assert cluster[0].global_tier is not None
        tiers.append(cluster[0].global_tier)
        return cluster

    # cold Poisson starts: every load follows a round-robin move (no prewarmed tier content)
    cfg = SimConfig(instances=4, warmup_s=0.0, measure_s=600.0, seed=1, arrivals="cold")
    simulator.build_cluster = spy  # type: ignore[assignment]
    try:
        simulator.simulate(work, "round-robin", 0.05, cfg)
        simulator.simulate(work, "round-robin", 0.05, replace(cfg, global_placement="node"))
    finally:
        simulator.build_cluster = build
    spread, node = tiers
    assert spread.bytes_loaded > 0 and spread.bytes_loaded_node_local == 0.0
    assert node.bytes_loaded_node_local == pytest.approx(node.bytes_loaded) and node.bytes_loaded > 0
