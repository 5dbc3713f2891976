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
