"""KV events: both wire encodings, medium filter, sequence gaps, and a real ZMQ PUB/SUB round trip."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
import zmq
import zmq.asyncio

from smetric.core import ports
from smetric.core.blockhash import external_hash
from smetric.epp.contracts import EndpointInfo
from smetric.epp.kvevents.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEventDecodeError,
    decode_payload,
)
from smetric.epp.kvevents.store import BlockStore
from smetric.epp.kvevents.subscriber import KvEventManager, KvEventSubscriber


def _map_payload(events: list[dict[str, object]]) -> bytes:
    return msgspec.msgpack.encode([1.5, events, 0])


def _stored(hashes: list[int], medium: str | None = "GPU") -> dict[str, object]:
    return {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": None,
        "token_ids": list(range(4 * len(hashes))),
        "block_size": 4,
        "lora_id": None,
        "medium": medium,
        "lora_name": None,
        "extra_keys": None,
    }


def _frames(seq: int, payload: bytes) -> list[bytes]:
    return [b"kv@10.0.0.1:8000@m", seq.to_bytes(8, "big"), payload]


def test_decodes_map_form() -> None:
    batch = decode_payload(
        _map_payload([_stored([1, 2]), {"type": "BlockRemoved", "block_hashes": [1], "medium": "GPU"}])
    )
    assert batch.ts == 1.5
    assert batch.events == (BlockStored((1, 2), None, 4, "GPU"), BlockRemoved((1,), "GPU"))


def test_decodes_array_tagged_form_and_bytes_hashes() -> None:
    digest = bytes(range(32))
    payload = msgspec.msgpack.encode(
        [2.0, [["BlockStored", [digest, 7], 5, [1, 2, 3, 4], 4, None, "GPU"], ["AllBlocksCleared"]]]
    )
    batch = decode_payload(payload)
    assert batch.events == (BlockStored((external_hash(digest), 7), 5, 4, "GPU"), AllBlocksCleared())


def test_unknown_events_are_skipped_and_garbage_raises() -> None:
    assert decode_payload(_map_payload([{"type": "SomethingNew", "x": 1}])).events == ()
    with pytest.raises(KvEventDecodeError):
        decode_payload(b"\xc1not msgpack")
    with pytest.raises(KvEventDecodeError):
        decode_payload(msgspec.msgpack.encode({"ts": 1}))
    with pytest.raises(KvEventDecodeError):
        decode_payload(_map_payload([{"type": "BlockStored", "block_hashes": "nope"}]))


def test_store_keeps_gpu_blocks_only() -> None:
    store = BlockStore()
    store.apply("a", decode_payload(_map_payload([_stored([1, 2]), _stored([3], medium="CPU")])).events)
    assert store.blocks("a") == {1, 2}
    store.apply("a", [BlockRemoved((3,), "CPU"), BlockRemoved((2,), None)])
    assert store.blocks("a") == {1}
    store.apply("a", [AllBlocksCleared()])
    assert store.blocks("a") == set()


def test_sequence_gap_resets_and_reports() -> None:
    store = BlockStore()
    gaps: list[str] = []
    sub = KvEventSubscriber("a", store, gaps.append)
    sub.handle(_frames(10, _map_payload([_stored([1, 2])])))  # joining late: any first seq is fine
    sub.handle(_frames(11, _map_payload([_stored([3])])))
    assert store.blocks("a") == {1, 2, 3} and gaps == []
    sub.handle(_frames(13, _map_payload([_stored([4])])))  # batch 12 lost
    assert gaps == ["a"]
    assert store.blocks("a") == {4}  # reset, then refilled from the new batch
    sub.handle(_frames(0, _map_payload([_stored([5])])))  # engine restarted
    assert gaps == ["a", "a"] and store.blocks("a") == {5}
    sub.handle([b"only-one-frame"])
    sub.handle(_frames(1, b"\xc1"))
    assert sub.gaps == 4 and store.blocks("a") == set()
    sub.handle(_frames(2, _map_payload([_stored([6])])))
    assert store.blocks("a") == {6} and sub.gaps == 4
    sub.reset()  # after an unexpected error: blocks and sequence forgotten, no gap on the next batch
    sub.handle(_frames(42, _map_payload([_stored([8])])))
    assert store.blocks("a") == {8} and sub.gaps == 4


async def _wait_for(cond: object, timeout_s: float = 5.0) -> None:
    assert callable(cond)
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


async def test_zmq_round_trip_gap_and_teardown() -> None:
    port = ports.free_port()
    ctx = zmq.asyncio.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind(f"tcp://127.0.0.1:{port}")
    store = BlockStore()
    gaps: list[str] = []
    manager = KvEventManager(store, gaps.append)
    ep = EndpointInfo("127.0.0.1:8000", kv_events_endpoint=f"tcp://127.0.0.1:{port}")
    manager.sync([ep])
    try:
        seq = 0

        async def send(events: list[dict[str, object]], skip: int = 0) -> None:
            nonlocal seq
            seq += skip
            await pub.send_multipart(_frames(seq, _map_payload(events)))
            seq += 1

        # The SUB connects asynchronously (slow joiner): publish until the first batch lands.
        async def first() -> None:
            while store.size(ep.address) == 0:
                await send([_stored([1, 2, 3])])
                await asyncio.sleep(0.02)

        await asyncio.wait_for(first(), 5.0)
        await send([{"type": "BlockRemoved", "block_hashes": [3], "medium": "GPU"}])
        await _wait_for(lambda: store.blocks(ep.address) == {1, 2})
        await send([_stored([9])], skip=2)
        await _wait_for(lambda: gaps == [ep.address])
        assert store.blocks(ep.address) == {9}
        manager.sync([])  # endpoint removed: socket torn down, blocks forgotten
        assert store.blocks(ep.address) is None and not manager.subscribers
    finally:
        await manager.stop()
        pub.close(linger=0)
        ctx.term()
