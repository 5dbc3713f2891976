"""Decoding of vLLM KV-event payloads (msgpack), both wire encodings.

A payload is ``[timestamp, [event, ...], dp_rank?]``. An event is either a map tagged by ``type``
(vLLM 0.32: ``{"type": "BlockStored", "block_hashes": [...], ...}``) or, in older releases, an array
tagged by its first element (``["BlockStored", block_hashes, parent_block_hash, token_ids,
block_size, lora_id, medium]``). Block hashes arrive as 64-bit integers by default, or as raw digests
(bytes) when ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0``; digests are folded to the integer form here
so one index serves both. Unknown event types are skipped; a malformed payload raises
:class:`KvEventDecodeError` (the subscriber then resynchronises that endpoint).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from smetric.core.blockhash import external_hash

MEDIUM_GPU = "GPU"

# Field order of the array-tagged form (after the tag), as the older vLLM structs declare them.
_STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium")
_REMOVED_FIELDS = ("block_hashes", "medium")


class KvEventDecodeError(ValueError):
    """The payload is not a KV-event batch in either known encoding."""


@dataclass(frozen=True, slots=True)
class BlockStored:
    block_hashes: tuple[int, ...]
    parent_block_hash: int | None
    block_size: int
    medium: str | None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    block_hashes: tuple[int, ...]
    medium: str | None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    pass


KvEvent = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass(frozen=True, slots=True)
class KvEventBatch:
    ts: float
    events: tuple[KvEvent, ...]
    dp_rank: int = 0


def _hash(value: Any) -> int:
    if isinstance(value, bool):
        raise KvEventDecodeError(f"bad block hash {value!r}")
    if isinstance(value, int):
        return value & 0xFFFF_FFFF_FFFF_FFFF
    if isinstance(value, bytes | bytearray):
        return external_hash(bytes(value))
    raise KvEventDecodeError(f"bad block hash {value!r}")


def _hashes(value: Any) -> tuple[int, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise KvEventDecodeError(f"block_hashes must be a list, got {type(value).__name__}")
    return tuple(_hash(v) for v in value)


def _medium(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _as_fields(raw: Any) -> tuple[str, Mapping[str, Any]]:
    if isinstance(raw, Mapping):
        kind = raw.get("type")
        if not isinstance(kind, str):
            raise KvEventDecodeError("event map without a string 'type'")
        return kind, raw
    if isinstance(raw, Sequence) and raw and isinstance(raw[0], str):
        kind = raw[0]
        names = _STORED_FIELDS if kind == "BlockStored" else _REMOVED_FIELDS if kind == "BlockRemoved" else ()
        return kind, dict(zip(names, raw[1:], strict=False))
    raise KvEventDecodeError(f"event is neither a tagged map nor a tagged array: {raw!r:.80}")


def decode_event(raw: Any) -> KvEvent | None:
    """One event in either encoding; ``None`` for an event type this picker does not use."""
    kind, fields = _as_fields(raw)
    if kind == "BlockStored":
        parent = fields.get("parent_block_hash")
        size = fields.get("block_size", 0)
        return BlockStored(
            block_hashes=_hashes(fields.get("block_hashes", ())),
            parent_block_hash=None if parent is None else _hash(parent),
            block_size=size if isinstance(size, int) else 0,
            medium=_medium(fields.get("medium")),
        )
    if kind == "BlockRemoved":
        return BlockRemoved(_hashes(fields.get("block_hashes", ())), _medium(fields.get("medium")))
    if kind == "AllBlocksCleared":
        return AllBlocksCleared()
    return None


def decode_payload(payload: bytes) -> KvEventBatch:
    """A msgpack ``[ts, [events], dp_rank?]`` payload; raises :class:`KvEventDecodeError`."""
    try:
        raw = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError as exc:
        raise KvEventDecodeError(f"not msgpack: {exc}") from exc
    if not isinstance(raw, list | tuple) or len(raw) < 2 or not isinstance(raw[1], list | tuple):
        raise KvEventDecodeError("payload is not [ts, [events...], dp_rank?]")
    ts = raw[0] if isinstance(raw[0], int | float) else 0.0
    rank = raw[2] if len(raw) > 2 and isinstance(raw[2], int) else 0
    events = tuple(e for e in (decode_event(r) for r in raw[1]) if e is not None)
    return KvEventBatch(ts=float(ts), events=events, dp_rank=rank)


def is_local_tier(medium: str | None) -> bool:
    """GPU blocks count for the local tier; ``None`` is GPU (releases before ``medium`` existed)."""
    return medium is None or medium.upper() == MEDIUM_GPU
