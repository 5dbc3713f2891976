"""The simulator's one-pass snapshot path (g set while the router view builds the snapshots, not by
copying each one afterwards) and the unexpanded block chain that g's search reads: both must leave
every figure of a run exactly as the two-pass path and the expanded list give it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from smetric.core.presets import get_preset
from smetric.sim.simulator import SimConfig, build_cluster, simulate
from smetric.sim.tier_view import BlockChain, TierView, block_keys
from tests.support.sim_synth import agent_work, comparable

P30 = get_preset("qwen3-30b-h20")
CFG = SimConfig(instances=3, warmup_s=0.0, measure_s=600.0, seed=5, arrivals="cold", global_tier="full")


PIECES = [
    (),
    ((7, 7),),
    ((0, 99),),
    ((5, 9), (1_000, 1_000), (20, 31)),
    ((10**9, 10**9 + 4), (3, 3), (40, 41), (500, 640)),
]


@pytest.mark.parametrize("pieces", PIECES)
def test_block_chain_reads_as_the_expanded_keys(pieces: tuple[tuple[int, int], ...]) -> None:
    keys, chain = block_keys(pieces), BlockChain(pieces)
    assert len(chain) == len(keys) and bool(chain) == bool(keys)
    assert [chain[i] for i in range(len(keys))] == keys
    assert [chain[-i] for i in range(1, len(keys) + 1)] == [keys[-i] for i in range(1, len(keys) + 1)]
    assert chain[1:-1] == keys[1:-1] and chain[::-1] == keys[::-1] and chain[:3] == keys[:3]
    for bad in (len(keys), -len(keys) - 1):
        with pytest.raises(IndexError):
            chain[bad]


@pytest.mark.parametrize(
    ("policy", "mode", "hits"),
    [
        ("smetric", "colocated", "estimate"),  # g only: the one-pass path
        ("smetric", "colocated", "exact"),  # the oracle's g, one pass
        ("lmetric+pieces", "disaggregated", "estimate"),
        ("smetric-tiered", "colocated", "estimate"),  # node facts too: the two-pass path
    ],
)
@pytest.mark.parametrize("flow_control", [False, True])
def test_the_one_pass_snapshots_change_no_figure(
    monkeypatch: pytest.MonkeyPatch, policy: str, mode: str, hits: str, flow_control: bool
) -> None:
    w = agent_work()
    cfg = replace(CFG, mode=mode, tier_hits=hits)
    if flow_control:
        cfg = replace(cfg, flow_control=json.dumps({"enabled": True}))
    fast = simulate(w, policy, 0.2, cfg).to_dict()
    monkeypatch.setattr(TierView, "sets_only_g", property(lambda self: False))  # every decision: two passes
    slow = simulate(w, policy, 0.2, cfg).to_dict()
    assert comparable(fast) == comparable(slow)  # both runs are of one policy
    assert fast["requests_in_window"] != 0


def test_the_one_pass_path_is_taken_only_where_enrich_sets_g_alone() -> None:
    w = agent_work()
    with_tier = build_cluster(CFG, P30, w.block_tokens)
    without = build_cluster(replace(CFG, global_tier="none"), P30, w.block_tokens)
    assert TierView(with_tier, w.block_tokens, 30.0, node_facts=False).sets_only_g
    assert not TierView(with_tier, w.block_tokens, 30.0, node_facts=True).sets_only_g
    assert not TierView(without, w.block_tokens, 30.0, node_facts=False).sets_only_g
