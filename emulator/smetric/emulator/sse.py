"""Server-sent-event framing as vLLM's OpenAI server writes it: ``data: <json>\\n\\n`` per chunk,
closed by ``data: [DONE]\\n\\n``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

DONE = b"data: [DONE]\n\n"


def frame(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def parse_frames(raw: bytes) -> Iterator[dict[str, Any] | None]:
    """Inverse of the framing (for tests and clients): yields each JSON chunk, ``None`` for [DONE].

    Raises ``ValueError`` on a line that is neither blank nor a ``data:`` field.
    """
    for block in raw.split(b"\n\n"):
        if not block.strip():
            continue
        if not block.startswith(b"data: "):
            raise ValueError(f"not an SSE data frame: {block[:80]!r}")
        data = block[len(b"data: ") :]
        if data == b"[DONE]":
            yield None
        else:
            yield orjson.loads(data)
