"""The picker's two-tier facts for smetric-tiered: global-tier index (KV events / capacity-aware
estimate), node topology from discovery, footprint, and the wiring in build_picker."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from smetric.core.views import EndpointSnapshot, RequestView
from smetric.epp.config import parse_config
from smetric.epp.contracts import EndpointInfo, EngineMetrics, PromptKey
from smetric.epp.discovery.pool import PoolSpec, pool_endpoints
from smetric.epp.discovery.standalone import parse_endpoints
from smetric.epp.index.approximate import ApproximateIndex
from smetric.epp.kvevents.events import BlockRemoved, BlockStored
from smetric.epp.kvevents.store import BlockStore
from smetric.epp.server.app import build_picker
from smetric.epp.server.static import StaticEndpointSource
from smetric.epp.server.tier_facts import GlobalTierIndex, TierFacts
from smetric.policy import params_from_mapping


def key(keys: tuple[int, ...], tokens: int | None = None) -> PromptKey:
    return PromptKey("p", tokens if tokens is not None else 16 * len(keys), block_keys=keys)


def stored(hashes: tuple[int, ...], medium: str | None) -> BlockStored:
    return BlockStored(block_hashes=hashes, parent_block_hash=None, block_size=16, medium=medium)


def test_full_store_estimate_holds_everything_routed() -> None:
    gi = GlobalTierIndex(16)
    assert gi.global_hit(key((1, 2, 3))) == 0
    gi.on_routed(key((1, 2, 3)))
    assert gi.global_hit(key((1, 2, 3, 4))) == 48
    assert gi.global_hit(key((9, 10))) == 0  # another prompt misses


def test_small_store_estimate_keeps_the_most_recent_tokens() -> None:
    gi = GlobalTierIndex(16, capacity_tokens=64)  # 4 keys
    gi.on_routed(key((1, 2, 3)))
    gi.on_routed(key((7, 8, 9)))
    assert gi.global_hit(key((7, 8, 9))) == 48
    assert gi.global_hit(key((1, 2, 3))) == 16  # tails evicted first: the prefix stays longest


def test_events_on_a_non_gpu_medium_feed_the_global_index_only() -> None:
    store = BlockStore()
    gi = GlobalTierIndex(16, store=store)
    gi.on_routed(key((5, 6)))  # estimate before any event
    store.apply("a", [stored((1, 2), "GPU"), stored((1, 2, 3), "CPU")])
    assert store.blocks("a") == {1, 2} and store.global_blocks() == {1, 2, 3}
    assert gi.from_events
    assert gi.global_hit(key((1, 2, 3, 4))) == 48
    assert gi.global_hit(key((5, 6))) == 0  # events are the truth once they arrive
    store.apply("b", [BlockRemoved((2,), "CPU")])
    assert gi.global_hit(key((1, 2, 3))) == 16
    assert gi.global_hit(key((1,), tokens=10)) == 10  # clamped to the prompt


def test_global_block_budget_clears_rather_than_grows() -> None:
    store = BlockStore(max_global_blocks=3)
    store.apply("a", [stored((1, 2, 3), "CPU")])
    store.apply("a", [stored((4, 5), "CPU")])
    assert store.global_blocks() == {4, 5}


def test_tier_facts_fill_snapshots_and_learn_from_dispatch() -> None:
    now = [100.0]
    tf = TierFacts(GlobalTierIndex(16), footprint_window_s=30.0, clock=lambda: now[0])
    eps = [EndpointInfo("10.0.0.1:8000", node="n0"), EndpointInfo("10.0.0.2:8000")]
    snaps = [EndpointSnapshot(e.address, global_hit_tokens=999) for e in eps]
    k = key((1, 2))
    out = tf.enrich(snaps, eps, k)
    assert [(s.global_hit_tokens, s.node, s.session_kv_tokens) for s in out] == [(0, "n0", 0.0), (0, "", 0.0)]
    tf.dispatched(k, "10.0.0.2:8000", 32)
    out = tf.enrich(snaps, eps, k)
    assert out[0].global_hit_tokens == 32 and out[1].session_kv_tokens == 32.0


def test_nodes_from_pod_spec_and_standalone_yaml(tmp_path: Path) -> None:
    spec = PoolSpec.from_pool(
        {
            "metadata": {"name": "p"},
            "spec": {"selector": {"matchLabels": {"app": "v"}}, "targetPorts": [{"number": 8000}]},
        }
    )
    pod = {
        "metadata": {"name": "a", "labels": {"app": "v"}},
        "spec": {"nodeName": "gpu-node-3"},
        "status": {
            "phase": "Running",
            "podIP": "10.1.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    assert [e.node for e in pool_endpoints(spec, [pod], 5557)] == ["gpu-node-3"]
    f = tmp_path / "eps.yaml"
    f.write_text("- {address: '10.0.0.1:8000', node: n1}\n- '10.0.0.2:8000'\n")
    assert [e.node for e in parse_endpoints(f"@{f}")] == ["n1", ""]


def _metrics() -> EngineMetrics:
    return EngineMetrics(0, 0, 0.0, 100_000, 16, 0.0, 0.0, scraped_at_s=1e12)


def test_build_picker_wires_tier_facts_for_every_policy_in_a_pool_with_a_tier() -> None:
    # with a tier: g for every policy (the gate and the ledger read it, docs/overload.md 8e), node facts for
    # smetric-tiered; without one only smetric-tiered (nodes, footprint) builds them
    source = StaticEndpointSource(["10.0.0.1:8000", "10.0.0.2:8000"])
    index = ApproximateIndex(block_tokens=16)
    for tier in (False, True):
        for name, expect in (
            ("lmetric", tier),
            ("round-robin", tier),
            ("smetric", tier),
            ("smetric-tiered", True),
        ):
            parameters = {"globalFetchSPerToken": 1e-5} if tier else {}
            cfg = parse_config({"policy": {"name": name, "parameters": parameters}})
            params = params_from_mapping(cfg.policy.parameters)
            picker = build_picker(cfg, params, source, index)
            assert (picker.tier_facts is not None) is expect, (name, tier)
            if expect:
                assert picker.tier_facts is not None and picker.tier_facts.node_facts is (
                    name == "smetric-tiered"
                )
    assert picker.tier_facts is not None and picker.tier_facts.index.tokens_per_key == 64
    pick = picker.pick(RequestView("r1", 1000), "x" * 4000)
    assert picker.tier_facts.footprint.tokens(pick.destination, picker.clock()) > 0
    assert picker.tier_facts.index.size() > 0


def test_a_baselines_ledger_charge_reads_the_tier_model_not_the_previous_turn() -> None:
    # A follow-up claims 3,000 tokens of history (est_hit) that were never routed (e.g. its previous turn was
    # shed): the tier holds none of it, so the framework charges the whole prompt as computed; the previous-turn
    # estimate credited the claimed 3,000 as a fetch. Routed once, the same prompt's chunks are there.
    cfg = parse_config({"policy": {"name": "lmetric", "parameters": {"globalFetchSPerToken": 1e-5}}})
    source = StaticEndpointSource(["10.0.0.1:8000", "10.0.0.2:8000"])
    picker = build_picker(
        cfg, params_from_mapping(cfg.policy.parameters), source, ApproximateIndex(block_tokens=16)
    )
    first = picker.pick(RequestView("r1", 4000, turn=2, est_hit_tokens=3000), "y" * 16_000)
    assert first.fetched_tokens == 0 and first.uncached_tokens == 4000
    again = picker.pick(RequestView("r2", 4000, turn=3, est_hit_tokens=3000), "y" * 16_000)
    assert again.uncached_tokens < 4000  # the first one's chunks: a local hit where it ran, a fetch elsewhere


def test_facts_of_gives_node_and_footprint_per_address() -> None:
    tf = TierFacts(GlobalTierIndex(16), footprint_window_s=30.0, clock=lambda: 5.0)
    eps = (EndpointInfo("10.0.0.1:8000", node="n0"), EndpointInfo("10.0.0.2:8000"))
    tf.dispatched(key((1,)), "10.0.0.1:8000", 100)
    facts = tf.facts_of(eps)
    assert facts("10.0.0.1:8000") == ("n0", 100.0)
    assert facts("10.0.0.2:8000") == ("", 0.0)
    assert facts("10.9.9.9:8000") == ("", 0.0)  # unknown address: no node, no footprint


def _smetric_picker(parameters: Mapping[str, object]):  # type: ignore[no-untyped-def]
    cfg = parse_config({"policy": {"name": "smetric", "parameters": parameters}})
    source = StaticEndpointSource(["10.0.0.1:8000", "10.0.0.2:8000"])
    return build_picker(
        cfg, params_from_mapping(cfg.policy.parameters), source, ApproximateIndex(block_tokens=16)
    )


def test_the_pools_segments_bound_smetrics_global_estimate() -> None:
    # globalSegmentTokens (per engine pod, rendered by the operator) x the engines discovered
    # sizes the write estimate; smetric-tiered's own tiered.globalCapacityTokens (a fixed total)
    # wins where it is set
    first = "a" * 8000  # ~2,000 tokens: more than a 2-engine store of 512 tokens each

    def run(picker):  # type: ignore[no-untyped-def]
        picker.pick(RequestView("s1", 2000), first)
        for i in range(4):  # later sessions push it out (LRU)
            picker.pick(RequestView(f"o{i}", 2000), chr(ord("b") + i) * 8000)
        assert picker.tier_facts is not None
        return picker.tier_facts.index.global_hit(picker.index.key(first + "b" * 400))

    assert run(_smetric_picker({"globalFetchSPerToken": 1e-5, "globalSegmentTokens": 512})) == 0
    assert run(_smetric_picker({"globalFetchSPerToken": 1e-5})) > 1500  # fully provisioned
    assert run(_smetric_picker({"globalFetchSPerToken": 1e-5, "globalSegmentTokens": 1 << 20})) > 1500
    cfg = parse_config(
        {
            "policy": {
                "name": "smetric-tiered",
                "parameters": {
                    "globalFetchSPerToken": 1e-5,
                    "globalSegmentTokens": 512,
                    "tiered": {"globalCapacityTokens": 1 << 20},
                },
            }
        }
    )
    source = StaticEndpointSource(["10.0.0.1:8000", "10.0.0.2:8000"])
    own = build_picker(
        cfg, params_from_mapping(cfg.policy.parameters), source, ApproximateIndex(block_tokens=16)
    )
    assert run(own) > 1500


def test_segment_capacity_follows_the_pools_size() -> None:
    gi = GlobalTierIndex(16, segment_tokens=64)  # 4 keys per engine
    assert gi.capacity_keys(1) == 4 and gi.capacity_keys(3) == 12
    gi.on_routed(key(tuple(range(10))), n_endpoints=3)  # 10 keys fit 3 engines' segments
    assert gi.global_hit(key(tuple(range(10)))) == 160
    gi.on_routed(key(tuple(range(100, 110))), n_endpoints=1)  # the pool shrank: 4 keys
    assert gi.size() == 4
    assert GlobalTierIndex(16, capacity_tokens=64, segment_tokens=1 << 20).capacity_keys(8) == 4


def test_without_a_global_tier_the_index_credits_no_global_hit() -> None:
    # The write estimate knows the prompt was routed, but a pool without a tier recomputes it:
    # g must stay 0 so the ledger charges compute, not a phantom fetch (guard in Picker.pick).
    assert _smetric_picker({}).tier_facts is None  # smetric on plain vLLM: no tier facts at all
    cfg = parse_config({"policy": {"name": "smetric-tiered"}})  # it reads the footprint, tier or not
    source = StaticEndpointSource(["10.0.0.1:8000", "10.0.0.2:8000"])
    picker = build_picker(
        cfg, params_from_mapping(cfg.policy.parameters), source, ApproximateIndex(block_tokens=16)
    )
    prompt = "x" * 40_000  # ~10k tokens
    picker.pick(RequestView("r1", 10_000), prompt)
    assert picker.tier_facts is not None and picker.tier_facts.index.size() == 0  # nothing recorded
    picker.tier_facts.index.on_routed(picker.index.key(prompt))  # as if it had been
    assert picker.tier_facts.index.global_hit(picker.index.key(prompt)) > 0
    snaps = []
    original = picker.snapshots

    def spy(endpoints, hits, global_hit_tokens=0, tier=None):  # type: ignore[no-untyped-def]
        out = original(endpoints, hits, global_hit_tokens, tier)
        snaps.append(out)
        return out

    picker.snapshots = spy  # type: ignore[method-assign]
    pick = picker.pick(RequestView("r2", 10_000, turn=1, est_hit_tokens=10_000), prompt + "y" * 400)
    assert snaps and all(s.global_hit_tokens == 0 for s in snaps[-1])
    assert pick.fetched_tokens == 0  # what is not local is computed, and charged as compute


def test_smetric_reads_g_only_and_skips_nodes_and_footprint() -> None:
    # node and footprint facts cost per decision; only smetric-tiered reads them
    smetric = _smetric_picker({"globalFetchSPerToken": 1e-5})
    assert smetric.tier_facts is not None and not smetric.tier_facts.node_facts
    pick = smetric.pick(RequestView("r1", 1000), "x" * 4000)
    assert smetric.tier_facts.footprint.tokens(pick.destination, smetric.clock()) == 0
    assert smetric.tier_facts.index.size() > 0  # g is still learned
    cfg = parse_config({"policy": {"name": "smetric-tiered", "parameters": {"globalFetchSPerToken": 1e-5}}})
    source = StaticEndpointSource(["10.0.0.1:8000", "10.0.0.2:8000"])
    tiered = build_picker(
        cfg, params_from_mapping(cfg.policy.parameters), source, ApproximateIndex(block_tokens=16)
    )
    assert tiered.tier_facts is not None and tiered.tier_facts.node_facts


def test_the_write_estimate_records_whole_lmcache_chunks() -> None:
    # globalChunkTokens (LMCache chunk_size, rendered by the operator): LMCache 0.5.6 stores a prompt's
    # whole chunks only (save_unfull_chunk false), so the estimate records no partial chunk
    prompt = "a" * 4000  # ~1,000 tokens: 3 whole 256-token chunks
    hits = {}
    for chunk in (None, 256):
        params = {"globalFetchSPerToken": 1e-5} | ({} if chunk is None else {"globalChunkTokens": chunk})
        picker = _smetric_picker(params)
        picker.pick(RequestView("s1", 1000), prompt)
        assert picker.tier_facts is not None
        hits[chunk] = picker.tier_facts.index.global_hit(picker.index.key(prompt + "b" * 400))
    assert hits[None] == 960 and hits[256] == 768  # 64-token keys: 15 of them, or the 12 in 3 chunks


def test_a_baseline_with_the_pieces_reads_g_in_the_picker_too() -> None:
    # lmetric+pieces: the picker builds the tier facts for it (g from the one tier model) and charges
    # the ledger with the fetch; lmetric as shipped gets the same g (the framework's: gate and ledger)
    prompt = "a" * 8000
    pickers = {}
    for name in ("lmetric", "lmetric+pieces"):
        cfg = parse_config({"policy": {"name": name, "parameters": {"globalFetchSPerToken": 1e-5}}})
        source = StaticEndpointSource(["10.0.0.1:8000", "10.0.0.2:8000"])
        pickers[name] = build_picker(
            cfg, params_from_mapping(cfg.policy.parameters), source, ApproximateIndex(block_tokens=16)
        )
    assert pickers["lmetric"].tier_facts is not None and not pickers["lmetric"].tier_facts.node_facts
    picker = pickers["lmetric+pieces"]
    assert picker.tier_facts is not None and not picker.tier_facts.node_facts
    picker.pick(RequestView("s1", 2000), prompt)
    again = picker.pick(RequestView("s2", 2100, est_hit_tokens=2000, turn=1), prompt + "b" * 400)
    assert again.fetched_tokens + again.uncached_tokens > 0
    assert picker.tier_facts.index.global_hit(picker.index.key(prompt + "b" * 400)) > 1500
