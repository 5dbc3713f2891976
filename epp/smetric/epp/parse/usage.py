"""Token usage from a model server's response: one JSON body or the events of an SSE stream.

OpenAI chat/completions (``usage.prompt_tokens``, ``completion_tokens``,
``prompt_tokens_details.cached_tokens``; in the last SSE chunk when ``stream_options.include_usage``),
the Responses API (``input_tokens``, ``output_tokens``, ``input_tokens_details.cached_tokens``; in
``response.completed``) and Anthropic Messages (``input_tokens`` excludes cache reads, so the prompt
is ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``; ``message_start`` then
``message_delta``). Unparseable data is ignored: usage is advisory, never an error.

:func:`carries_output` tells the first token of a stream apart from opening events: vLLM's Responses
stream sends ``response.created`` and ``response.in_progress`` at once, before the engine produced
anything (``vllm/entrypoints/openai/responses/serving.py``, ``responses_stream_generator``), so its
first body chunk is no first token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

# SSE events a server sends before the model produced a token (vLLM's Responses stream opens with
# the first two; ``queued`` and Anthropic's keep-alive ``ping`` carry no token either).
OPENING_EVENTS = frozenset({b"response.created", b"response.in_progress", b"response.queued", b"ping"})
_TYPE = re.compile(rb'"type"\s*:\s*"([^"]*)"')


def carries_output(chunk: bytes) -> bool:
    """``True`` when an SSE body chunk holds an event other than the opening ones (a token, the
    end, an error): a block's name is its ``event:`` line, else the first ``"type"`` of its
    ``data:`` (a chat chunk without one counts as output). A block with neither line is the rest of
    an event split over chunks and is skipped."""
    for block in chunk.replace(b"\r\n", b"\n").split(b"\n\n"):
        name: bytes | None = None
        has_data = False
        for line in block.split(b"\n"):
            if line.startswith(b"event:"):
                name = line[6:].strip()
                break
            if line.startswith(b"data:"):
                has_data = True
                found = _TYPE.search(line)
                name = found.group(1) if found else b""
                break
        if name is None and not has_data:
            continue
        if name not in OPENING_EVENTS:
            return True
    return False


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _usage_of(doc: object) -> dict[str, Any] | None:
    if not isinstance(doc, dict):
        return None
    for holder in (doc, doc.get("message"), doc.get("response")):
        if isinstance(holder, dict) and isinstance(holder.get("usage"), dict):
            usage: dict[str, Any] = holder["usage"]
            return usage
    return None


def _details(u: dict[str, Any], name: str) -> int | None:
    d = u.get(name)
    return _int(d.get("cached_tokens")) if isinstance(d, dict) else None


def extract_usage(doc: object) -> Usage | None:
    u = _usage_of(doc)
    if u is None:
        return None
    prompt = _int(u.get("prompt_tokens"))
    cached = _details(u, "prompt_tokens_details")
    if prompt is None:
        prompt = _int(u.get("input_tokens"))
        cached = _details(u, "input_tokens_details")
        read = _int(u.get("cache_read_input_tokens"))
        if read is not None:  # Anthropic: input_tokens counts only the uncached part
            cached = read
            prompt = (prompt or 0) + read + (_int(u.get("cache_creation_input_tokens")) or 0)
    completion = _int(u.get("completion_tokens"))
    if completion is None:
        completion = _int(u.get("output_tokens"))
    return Usage(prompt, completion, cached)


def _merge(old: Usage | None, new: Usage) -> Usage:
    if old is None:
        return new
    return Usage(
        new.prompt_tokens if new.prompt_tokens is not None else old.prompt_tokens,
        new.completion_tokens if new.completion_tokens is not None else old.completion_tokens,
        new.cached_tokens if new.cached_tokens is not None else old.cached_tokens,
    )


class UsageReader:
    """Feed response body chunks; :meth:`result` gives the usage seen (``None`` if none).

    SSE: complete ``data:`` lines mentioning ``"usage"`` are parsed as they arrive (only a partial
    last line is kept). JSON: the body is accumulated up to ``max_json_bytes`` and parsed at the end;
    a larger body is not parsed (usage unknown).
    """

    __slots__ = ("_buf", "_overflow", "_sse", "_usage", "max_json_bytes")

    def __init__(self, sse: bool, max_json_bytes: int = 4 * 1024 * 1024) -> None:
        self._sse = sse
        self._buf = bytearray()
        self._usage: Usage | None = None
        self._overflow = False
        self.max_json_bytes = max_json_bytes

    def feed(self, chunk: bytes) -> None:
        if self._overflow:
            return
        self._buf += chunk
        if not self._sse:
            if len(self._buf) > self.max_json_bytes:
                self._overflow = True
                self._buf.clear()
            return
        end = self._buf.rfind(b"\n")
        if end < 0:
            return
        lines = bytes(self._buf[: end + 1])
        del self._buf[: end + 1]
        if b'"usage"' not in lines:
            return
        for line in lines.split(b"\n"):
            self._sse_line(line)

    def _sse_line(self, line: bytes) -> None:
        line = line.strip()
        if not line.startswith(b"data:") or b'"usage"' not in line:
            return
        try:
            found = extract_usage(orjson.loads(line[5:]))
        except orjson.JSONDecodeError:
            return
        if found is not None:
            self._usage = _merge(self._usage, found)

    def result(self) -> Usage | None:
        if self._overflow:
            return None
        if self._sse:
            if self._buf:
                self._sse_line(bytes(self._buf))
                self._buf.clear()
            return self._usage
        if not self._buf:
            return None
        try:
            doc = orjson.loads(self._buf)
        except orjson.JSONDecodeError:
            return None
        return extract_usage(doc)
