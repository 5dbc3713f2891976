"""Server-sent-event framing as vLLM's OpenAI server writes it: ``data: <json>\\n\\n`` per chunk,
closed by ``data: [DONE]\\n\\n``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"


def frame(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def event_frame(payload: dict[str, Any]) -> bytes:
    """A named event, ``event: <type>\\ndata: <json>\\n\\n``, as vLLM writes the Anthropic
    Messages and Responses streams (the name is the payload's ``type``); no ``[DONE]`` follows."""
    return b"event: " + str(payload["type"]).encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def parse_frames(raw: bytes) -> Iterator[dict[str, Any] | None]:
    """Inverse of the framing (for tests and clients): yields each JSON chunk, ``None`` for [DONE].

    Raises ``ValueError`` on a line that is neither blank nor a ``data:`` field.
    """
    for block in raw.split(b"\n\n"):
        if not block.strip():
            continue
        if block.startswith(b"event: "):  # a named event: its data line carries the payload
            block = block.split(b"\n", 1)[1] if b"\n" in block else b""
        if not block.startswith(b"data: "):
            raise ValueError(f"not an SSE data frame: {block[:80]!r}")
        data = block[len(b"data: ") :]
        if data == b"[DONE]":
            yield None
        else:
            yield orjson.loads(data)
