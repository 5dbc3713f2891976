"""KV-cache events in vLLM's wire format, published on a ZMQ PUB socket per instance.

Frames: ``[topic, seq (8-byte big-endian), payload]``; ``seq`` counts batches from 0 per
publisher. ``payload`` is msgpack of ``[ts, [event, ...], dp_rank]`` where each event is a map
tagged ``type`` (vLLM 0.32 "map" form, see ``shared/reference/protocols.md``)::

    {"type": "BlockStored", "block_hashes": [int...], "parent_block_hash": int | None,
     "token_ids": [int...], "block_size": int, "lora_id": None, "medium": "GPU",
     "lora_name": None, "extra_keys": None}
    {"type": "BlockRemoved", "block_hashes": [int...], "medium": "GPU"}
    {"type": "AllBlocksCleared"}

The structs below mirror ``vllm.distributed.kv_events`` so msgspec produces the same bytes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import msgspec
import zmq
import zmq.asyncio

MEDIUM_GPU = "GPU"


class BlockStored(msgspec.Struct, tag=True, frozen=True):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None
    medium: str | None = MEDIUM_GPU
    lora_name: str | None = None
    extra_keys: list[Any] | None = None


class BlockRemoved(msgspec.Struct, tag=True, frozen=True):
    block_hashes: list[int]
    medium: str | None = MEDIUM_GPU


class AllBlocksCleared(msgspec.Struct, tag=True, frozen=True):
    pass


KVCacheEvent = BlockStored | BlockRemoved | AllBlocksCleared


class KVEventBatch(msgspec.Struct, array_like=True, frozen=True):
    ts: float
    events: list[KVCacheEvent]
    data_parallel_rank: int = 0


def encode_batch(events: Sequence[KVCacheEvent], ts: float, dp_rank: int = 0) -> bytes:
    return msgspec.msgpack.encode(KVEventBatch(ts=ts, events=list(events), data_parallel_rank=dp_rank))


def decode_batch(payload: bytes) -> KVEventBatch:
    """Strict decoder for this format (tests and tools); raises ``msgspec.DecodeError``."""
    return msgspec.msgpack.decode(payload, type=KVEventBatch)


class KvEventPublisher:
    """One instance's PUB socket. ``publish`` never blocks: PUB drops at the high-water mark,
    which subscribers see as a sequence gap (they must resynchronise, as with vLLM)."""

    def __init__(self, ctx: zmq.asyncio.Context, endpoint: str, topic: str, hwm: int = 100_000) -> None:
        self._sock = ctx.socket(zmq.PUB)
        self._sock.setsockopt(zmq.SNDHWM, hwm)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(endpoint)
        self._topic = topic.encode()
        self._seq = 0
        self.endpoint = endpoint

    @property
    def next_seq(self) -> int:
        return self._seq

    async def publish(self, events: Sequence[KVCacheEvent]) -> None:
        if not events:
            return
        payload = encode_batch(events, time.time())
        frames = (self._topic, self._seq.to_bytes(8, "big"), payload)
        self._seq += 1
        await self._sock.send_multipart(frames)

    def close(self) -> None:
        self._sock.close(linger=0)
