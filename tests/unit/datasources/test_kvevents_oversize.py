"""KV events over real ZMQ: a message over ``ZMQ_MAXMSGSIZE`` (libzmq drops that connection and
never reconnects it) and malformed frames are each a reported gap, and batches published after
them are applied again (the subscriber reconnects and resynchronises instead of waiting forever)."""

from __future__ import annotations

import asyncio
import itertools

import msgspec
import zmq
import zmq.asyncio

from smetric.epp.contracts import EndpointInfo
from smetric.epp.kvevents.store import BlockStore
from smetric.epp.kvevents.subscriber import MAX_MESSAGE_BYTES, KvEventManager

ADDRESS = "127.0.0.1:8000"


def _batch(hashes: list[int]) -> bytes:
    stored = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": None, "token_ids": [],
              "block_size": 16, "lora_id": None, "medium": "GPU"}  # fmt: skip
    return msgspec.msgpack.encode([1.5, [stored], 0])


class _Publisher:
    """A PUB socket with its own sequence numbers (one per batch, as vLLM's publisher)."""

    def __init__(self, ctx: zmq.asyncio.Context) -> None:
        self.sock = ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.seq = itertools.count()

    async def send(self, payload: bytes) -> None:
        await self.sock.send_multipart([b"kv", next(self.seq).to_bytes(8, "big"), payload])

    async def until_applied(self, store: BlockStore, first_hash: int, timeout_s: float = 5.0) -> bool:
        """Publish fresh batches every 20 ms until one of them is in the store; False on timeout."""
        hashes = itertools.count(first_hash)
        sent: set[int] = set()
        deadline = asyncio.get_running_loop().time() + timeout_s
        while asyncio.get_running_loop().time() < deadline:
            h = next(hashes)
            sent.add(h)
            await self.send(_batch([h]))
            await asyncio.sleep(0.02)
            if sent & (store.blocks(ADDRESS) or set()):
                return True
        return False


async def _run_case(bad: list[list[bytes]]) -> tuple[list[str], int, bool, bool]:
    """Connect, then publish ``bad`` messages, then good batches; returns (gaps, reconnects,
    connected before, applied after)."""
    ctx = zmq.asyncio.Context()
    pub = _Publisher(ctx)
    store = BlockStore()
    gaps: list[str] = []
    manager = KvEventManager(store, gaps.append)
    manager.sync([EndpointInfo(ADDRESS, kv_events_endpoint=f"tcp://127.0.0.1:{pub.port}")])
    try:
        before = await pub.until_applied(store, 1_000)  # the SUB connects asynchronously
        for frames in bad:
            await pub.sock.send_multipart(frames)
        after = await pub.until_applied(store, 2_000)
        return gaps, manager.subscribers[ADDRESS].reconnects, before, after
    finally:
        await manager.stop()
        pub.sock.close(linger=0)
        ctx.term()


async def test_oversized_message_is_a_gap_then_reconnect_and_resync() -> None:
    big = [b"kv", (10**6).to_bytes(8, "big"), b"\x00" * (2 * MAX_MESSAGE_BYTES)]
    gaps, reconnects, before, after = await _run_case([big])
    assert before
    assert after, "no batch applied after the oversized message: the subscription ended silently"
    assert reconnects >= 1 and gaps and set(gaps) == {ADDRESS}


async def test_malformed_frames_are_gaps_and_the_subscription_continues() -> None:
    bad = [[b"kv", b"short-seq", _batch([7])], [b"kv", (10**6).to_bytes(8, "big"), b"\xc1not msgpack"]]
    gaps, reconnects, before, after = await _run_case(bad)
    assert before and after
    assert len(gaps) >= 2 and reconnects == 0  # framing errors need no new connection


async def test_the_limit_is_a_setting_and_zero_lifts_it() -> None:
    """``--kv-events-max-message-bytes 0``: a message past the default limit is applied whole."""
    ctx = zmq.asyncio.Context()
    pub = _Publisher(ctx)
    store = BlockStore()
    manager = KvEventManager(store, max_message_bytes=0)
    manager.sync([EndpointInfo(ADDRESS, kv_events_endpoint=f"tcp://127.0.0.1:{pub.port}")])
    try:
        assert await pub.until_applied(store, 1_000)
        big = list(range(10**7, 10**7 + 600_000))  # ~5.4 MB of msgpack: over the default 4 MiB
        await pub.send(_batch(big))
        deadline = asyncio.get_running_loop().time() + 5.0
        while store.size(ADDRESS) < len(big) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        assert big[-1] in (store.blocks(ADDRESS) or set())
        assert manager.subscribers[ADDRESS].reconnects == 0
    finally:
        await manager.stop()
        pub.sock.close(linger=0)
        ctx.term()
