"""One tier model for both tools: the simulator's adapter (TierView) and the picker's (GlobalTierIndex) fed the same
sequence of routed prompts and store events give the same g, with the write estimate and with events, bounded or
not. Both are adapters of smetric.router.tier_model.GlobalTierModel."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

import pytest

from smetric.core.presets import get_preset
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.engine import EngineRequest, Instance, Piece
from smetric.engine.global_tier import GlobalTier
from smetric.epp.contracts import PromptKey
from smetric.epp.kvevents.events import BlockStored
from smetric.epp.kvevents.store import BlockStore
from smetric.epp.server.tier_facts import GlobalTierIndex
from smetric.router.tier_model import GlobalTierModel
from smetric.sim.simulator import SimConfig, build_cluster
from smetric.sim.tier_view import TierView, _StoreEvents, block_keys

P30 = get_preset("qwen3-30b-h20")
BT = 64
CHUNK = 256


def sessions(seed: int, n: int = 60) -> list[EngineRequest]:
    """Multi-turn prompts over chained block ids: each turn extends its session's previous prompt."""
    rng = random.Random(seed)
    nxt = 0
    prompts: dict[int, list[int]] = {}
    out: list[EngineRequest] = []
    for i in range(n):
        s = rng.randrange(6)
        ids = prompts.get(s, [])
        grow = rng.randrange(1, 40)
        ids = ids + list(range(nxt, nxt + grow))
        nxt += grow
        prompts[s] = ids
        tokens = len(ids) * BT - rng.randrange(BT)  # a partial last block
        pieces = tuple((x, x) for x in ids)
        out.append(EngineRequest(f"r{i}", tokens, 1, pieces, ()))
    return out


def picker_key(req: EngineRequest) -> PromptKey:
    return PromptKey("p", req.prompt_tokens, block_keys=tuple(block_keys(req.prompt_pieces)))


@pytest.mark.parametrize("tier", ["small", "full"])
@pytest.mark.parametrize("source", ["estimate", "events"])
def test_the_simulators_and_the_pickers_adapters_give_identical_g(tier: str, source: str) -> None:
    cfg = replace(SimConfig(instances=2, warmup_s=0.0, measure_s=60.0), global_tier=tier)
    cluster = build_cluster(cfg, P30, BT)
    gt = cluster[0].global_tier
    assert gt is not None
    cap = gt.capacity_blocks
    if cap is not None:  # a tier small enough that this sequence evicts
        cap = 300
        gt = replace_capacity(cluster, cap)
    sim = TierView(cluster, BT, footprint_window_s=30.0, hits=source, chunk_tokens=CHUNK, node_facts=False)
    store = BlockStore()
    picker = GlobalTierIndex(
        BT, store=store, capacity_tokens=None if cap is None else cap * BT, chunk_tokens=CHUNK, max_keys=10**9
    )
    if source == "events":  # every block the tier newly stores reaches both (LMCache skips keys it holds)
        assert sim.model is not None
        gt.observe_stores(Tee(_StoreEvents(sim.model), store))
    snaps = [EndpointSnapshot(inst.name) for inst in cluster]
    gs_sim: list[int] = []
    gs_picker: list[int] = []
    for k, req in enumerate(sessions(7)):
        gs_sim.append(sim.enrich(snaps, req, 0.0)[0].global_hit_tokens)
        gs_picker.append(picker.global_hit(picker_key(req)))
        sim.dispatched(
            snaps[0],
            RequestView(req.request_id, req.prompt_tokens),
            0.0,
            req.prompt_pieces,
            req.prompt_tokens,
        )
        picker.on_routed(picker_key(req))
        if source == "events" and k % 3 == 0:  # the tier stores this prompt's whole chunks: both hear of it
            lo, hi = gt.written_range(0, req.prompt_tokens, BT, len(req.prompt_pieces))
            written = list(req.prompt_pieces[lo:hi])
            gt.write(written)
    assert gs_sim == gs_picker
    assert any(g > 0 for g in gs_sim) and any(g == 0 for g in gs_sim[1:])  # hits and misses both seen
    assert sim.model is not None and sim.model.from_events == (source == "events") == picker.from_events


class Tee:
    """The simulated tier's store events to the simulator's adapter and, as LMCache's BlockStored
    (medium "cpu", no removals), to the picker's block store."""

    def __init__(self, sim: _StoreEvents, store: BlockStore) -> None:
        self.sim, self.store = sim, store

    def blocks_stored(self, pieces: Sequence[Piece]) -> None:
        self.sim.blocks_stored(pieces)
        self.store.apply("a", [BlockStored(tuple(block_keys(pieces)), None, BT, medium="cpu")])

    def blocks_removed(self, pieces: Sequence[Piece]) -> None:
        self.sim.blocks_removed(pieces)


def replace_capacity(cluster: list[Instance], capacity_blocks: int) -> GlobalTier:
    """A bounded tier of ``capacity_blocks`` shared by the cluster (small enough to evict in this test)."""
    old = cluster[0].global_tier
    assert old is not None
    tier = GlobalTier(capacity_blocks, old.block_bytes, old.nic_bytes_s, 1, old.path)
    for inst in cluster:
        inst.global_tier = tier
    return tier


def test_the_model_records_whole_chunks_and_events_replace_the_estimate() -> None:
    m = GlobalTierModel(BT, None, None, CHUNK)
    chain = list(range(10))  # 640 tokens of keys
    m.routed(chain, 600)  # 2 whole chunks = 512 tokens = 8 keys
    assert m.global_hit(chain, 640) == 512
    m.stored([100, 101])  # the first event: the estimate is dropped
    assert m.global_hit(chain, 640) == 0 and m.global_hit([100, 101, 102], 192) == 128
    m.routed(chain, 640)  # with events, a routed prompt refreshes its held prefix only
    assert m.global_hit(chain, 640) == 0
