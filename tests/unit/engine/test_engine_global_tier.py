"""Global tier: capacity kinds, transfer time = bytes / NIC bandwidth, FIFO contention per node."""

from __future__ import annotations

import pytest

from smetric.core.presets import PRESETS
from smetric.engine import GlobalTier, make_global_tier
from smetric.engine.global_tier import SMALL_TIER_BYTES

P30 = PRESETS["qwen3-30b-h20"]
BLOCK_BYTES = 64 * P30.model.kv_bytes_per_token
NIC = 200e9 / 8  # 200 Gb/s in bytes/s


def test_capacity_kinds() -> None:
    assert make_global_tier("none", P30, 32, 64) is None
    full = make_global_tier("full", P30, 32, 64)
    assert full is not None and full.capacity_blocks is None
    small = make_global_tier("small", P30, 32, 64)
    assert small is not None and small.capacity_blocks == int(SMALL_TIER_BYTES // BLOCK_BYTES)
    with pytest.raises(ValueError, match="unknown global tier"):
        make_global_tier("huge", P30, 32, 64)


def test_nodes_follow_gpus_per_instance() -> None:
    tier = make_global_tier("full", P30, 32, 64)
    assert tier is not None
    # 8 single-GPU instances per 8-GPU node -> 4 nodes
    assert [tier.link_free_s(k) for k in range(4)] == [0.0] * 4
    with pytest.raises(IndexError):
        tier.link_free_s(4)


def test_transfer_time_is_bytes_over_bandwidth() -> None:
    tier = GlobalTier(None, BLOCK_BYTES, NIC, 2)
    end = tier.load(0, 1_000, now_s=5.0)
    assert end == pytest.approx(5.0 + 1_000 * BLOCK_BYTES / NIC)
    assert tier.bytes_loaded == pytest.approx(1_000 * BLOCK_BYTES)


def test_concurrent_loads_on_one_node_queue_fifo_other_nodes_do_not() -> None:
    tier = GlobalTier(None, BLOCK_BYTES, NIC, 2)
    one = 1_000 * BLOCK_BYTES / NIC
    a = tier.load(0, 1_000, 0.0)
    b = tier.load(0, 1_000, 0.0)  # same NIC: waits for a
    c = tier.load(1, 1_000, 0.0)  # another node: in parallel
    assert a == pytest.approx(one)
    assert b == pytest.approx(2 * one)
    assert c == pytest.approx(one)
    d = tier.load(0, 1_000, 10 * one)  # link idle again
    assert d == pytest.approx(11 * one)


def test_small_tier_evicts_lru() -> None:
    tier = GlobalTier(10, BLOCK_BYTES, NIC, 1)
    tier.write([(1, 6)])
    tier.write([(100, 105)])
    assert tier.cached_blocks == 10
    assert tier.match([(100, 105)]) == 6
    assert tier.match([(1, 6)]) == 4  # the older write lost its tail


def test_zero_blocks_load_is_free() -> None:
    tier = GlobalTier(None, BLOCK_BYTES, NIC, 1)
    assert tier.load(0, 0, 3.0) == 3.0
    assert tier.loads == 0


def test_bad_parameters_rejected() -> None:
    with pytest.raises(ValueError):
        GlobalTier(None, BLOCK_BYTES, 0.0, 1)


# ---------------------------------------------------------------- calibrated path
from smetric.engine.global_tier import CALIBRATED, LINE_RATE, GlobalPath  # noqa: E402

GB = 1e9 / 8  # bytes/s per Gb/s


def _tier(path: GlobalPath, nodes: int = 2, gpus: int = 1) -> GlobalTier:
    return GlobalTier(None, BLOCK_BYTES, NIC, nodes, path, gpus)


def test_calibrated_defaults_are_the_documented_ones() -> None:
    assert GlobalPath(60.0, 200.0, 0.002, True, "sync") == CALIBRATED
    assert GlobalPath(None, None, 0.0, False, "async", save_copy=False) == LINE_RATE  # free writes
    assert _tier(CALIBRATED).synchronous and not _tier(LINE_RATE).synchronous
    assert GlobalTier(None, BLOCK_BYTES, NIC, 1).path == LINE_RATE  # no path: the old model


@pytest.mark.parametrize(
    "bad",
    [
        {"load_gbit_s_per_gpu": 0.0},
        {"load_gbit_s_per_gpu": float("nan")},
        {"store_gbit_s_per_node": -1.0},
        {"lookup_s": -0.001},
        {"load_mode": "maybe"},
    ],
)
def test_bad_paths_are_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        GlobalPath(**bad)  # type: ignore[arg-type]


def test_a_lone_load_runs_at_the_per_gpu_rate_not_line_rate() -> None:
    tier = _tier(GlobalPath(60.0, None, 0.0, False, "async"))
    end = tier.load(0, 1_000, now_s=2.0)
    assert end == pytest.approx(2.0 + 1_000 * BLOCK_BYTES / (60 * GB))
    # a 2-GPU (TP) instance loads both shards in parallel: twice the rate
    tp2 = _tier(GlobalPath(60.0, None, 0.0, False, "async"), gpus=2)
    assert tp2.load(0, 1_000, 2.0) == pytest.approx(2.0 + 1_000 * BLOCK_BYTES / (120 * GB))


def test_concurrent_loads_share_the_node_link_once_it_is_full() -> None:
    tier = _tier(GlobalPath(100.0, None, 0.0, False, "async"))  # two loads fill the 200 Gb/s NIC
    own = 1_000 * BLOCK_BYTES / (100 * GB)
    a, b = tier.load(0, 1_000, 0.0), tier.load(0, 1_000, 0.0)
    assert a == pytest.approx(own) and b == pytest.approx(own)  # both at their own rate
    c = tier.load(0, 1_000, 0.0)  # the third waits for the link: 3 x bytes at line rate
    assert c == pytest.approx(3 * 1_000 * BLOCK_BYTES / NIC)
    assert tier.load(1, 1_000, 0.0) == pytest.approx(own)  # another node is free


def test_the_store_side_limits_readers_on_every_node() -> None:
    # store: 2 nodes x 50 Gb/s = 100 Gb/s total; readers on two nodes contend there
    tier = _tier(GlobalPath(None, 50.0, 0.0, False, "async"))
    a = tier.load(0, 1_000, 0.0)
    b = tier.load(1, 1_000, 0.0)
    one = 1_000 * BLOCK_BYTES / (100 * GB)
    assert a == pytest.approx(one) and b == pytest.approx(2 * one)
    assert tier.store_free_s() == pytest.approx(2 * one)


def test_write_back_occupies_the_link_only_when_charged() -> None:
    pieces = ((0, 999),)
    for charged in (True, False):
        tier = _tier(GlobalPath(None, None, 0.0, charged, "async"))
        tier.write(pieces, node=0, now_s=0.0)
        assert tier.match(pieces) == 1_000  # content is written either way
        end = tier.load(0, 1_000, 0.0)
        one = 1_000 * BLOCK_BYTES / NIC
        assert end == pytest.approx(2 * one if charged else one)
        assert tier.bytes_written == pytest.approx(1_000 * BLOCK_BYTES if charged else 0.0)
    tier = _tier(CALIBRATED)
    tier.write(pieces)  # no node given: content only, no traffic
    assert tier.link_free_s(0) == 0.0


def test_make_global_tier_passes_the_path_and_gpus() -> None:
    tier = make_global_tier("full", P30, 32, 64, path=CALIBRATED)
    assert tier is not None and tier.path == CALIBRATED
    assert tier.load_bytes_s == pytest.approx(60 * GB)
    assert tier.store_bytes_s == pytest.approx(4 * 200 * GB)  # 32 instances = 4 nodes
    legacy = make_global_tier("full", P30, 32, 64)
    assert legacy is not None and legacy.path == LINE_RATE
