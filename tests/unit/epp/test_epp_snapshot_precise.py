"""The precise index survives a picker restart: its block sets go into the same snapshot as the
approximate index's keys, and a snapshot too old to trust is not restored."""

from __future__ import annotations

import time
from pathlib import Path

import orjson

from smetric.core.blockhash import BlockHasher
from smetric.core.tokenizer import FallbackTokenizer
from smetric.epp.index.precise import PreciseIndex
from smetric.epp.kvevents.events import BlockStored
from smetric.epp.kvevents.store import BlockStore
from smetric.epp.main import state_keeper
from smetric.epp.server.snapshot import StateKeeper, dump, load
from smetric.epp.settings import PickerSettings

EPS = ("10.0.0.1:8000", "10.0.0.2:8000")


def _index() -> PreciseIndex:
    return PreciseIndex(FallbackTokenizer(), BlockHasher(16, "0"), BlockStore())


def _warm() -> tuple[PreciseIndex, list[str]]:
    """Each session's prompt stored on one engine, as its KV events would report it."""
    index = _index()
    prompts = [f"session {i} " + "tool output line " * 200 for i in range(6)]
    for i, p in enumerate(prompts):
        key = index.key(p)
        stored = BlockStored(block_hashes=key.block_keys, parent_block_hash=None, block_size=16, medium="GPU")
        index.store.apply(EPS[i % 2], [stored])
    return index, prompts


def _hits(index: PreciseIndex, prompts: list[str]) -> list[dict[str, int]]:
    return [index.local_hits(index.key(p + " next turn"), EPS) for p in prompts]


async def test_a_restarted_picker_restores_the_block_sets_from_its_state_file(tmp_path: Path) -> None:
    warm, prompts = _warm()
    assert all(max(h.values()) > 0 for h in _hits(warm, prompts))
    path = tmp_path / "state.json"
    keeper = StateKeeper(warm, str(path), 60.0)
    await keeper.start()
    await keeper.stop()  # the final snapshot (SIGTERM)
    fresh = _index()
    assert all(max(h.values()) == 0 for h in _hits(fresh, prompts))  # a cold restart knows nothing
    assert await StateKeeper(fresh, str(path), 60.0).restore() == str(path)
    assert _hits(fresh, prompts) == _hits(warm, prompts)


def test_an_old_precise_snapshot_is_not_restored() -> None:
    warm, prompts = _warm()
    doc = orjson.loads(dump(warm))
    doc["saved_at"] = time.time() - warm.snapshot_max_age_s - 5
    fresh = _index()
    assert not load(fresh, orjson.dumps(doc), "old")
    assert all(max(h.values()) == 0 for h in _hits(fresh, prompts))


def test_the_picker_keeps_state_for_the_precise_index(tmp_path: Path) -> None:
    s = PickerSettings.from_argv(["--prefix-index=precise", f"--state-file={tmp_path / 's.json'}"])
    assert state_keeper(s, _index()) is not None


def test_the_picker_default_index_is_precise_when_the_engines_tokenizer_is_given() -> None:
    assert PickerSettings.from_argv([]).prefix_index == "approximate"
    assert PickerSettings.from_argv(["--tokenizer=Qwen/Qwen3-8B"]).prefix_index == "precise"
    explicit = PickerSettings.from_argv(["--tokenizer=Qwen/Qwen3-8B", "--prefix-index=approximate"])
    assert explicit.prefix_index == "approximate"


async def test_restored_blocks_survive_the_first_subscription() -> None:
    """Kubernetes discovery may name the endpoints after the state file was read: subscribing to
    an endpoint keeps the blocks restored for it."""
    from smetric.epp.contracts import EndpointInfo
    from smetric.epp.kvevents.subscriber import KvEventManager

    warm, prompts = _warm()
    fresh = _index()
    assert load(fresh, dump(warm), "file")
    manager = KvEventManager(fresh.store)
    manager.sync([EndpointInfo(a, kv_events_endpoint="tcp://127.0.0.1:9") for a in EPS])
    try:
        assert _hits(fresh, prompts) == _hits(warm, prompts)
    finally:
        await manager.stop()
