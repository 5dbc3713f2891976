"""Streaming clients (aiohttp) that measure what a coding agent would feel: OpenAI chat
completions (:class:`ChatClient`) and Anthropic Messages, the API Claude Code speaks
(:class:`AnthropicClient`, ``smetric bench --api anthropic``).

TTFT is the time from sending the request to the first SSE event carrying text (chat: a chunk with
``delta.content``; Anthropic: a ``content_block_delta``); end-to-end latency is until the stream's
end (``[DONE]`` / ``message_stop``). Output tokens come from the final usage (chat:
``stream_options.include_usage``; Anthropic: ``message_delta``), else from the number of text
events. The emulator adds its own first/last-token times (wall) and its modelled engine times to
that final event (``smetric_server_timing``), kept in the :class:`Outcome`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import orjson

from smetric.bench.replay import Outcome, SendSpec
from smetric.emulator.protocol import SERVER_TIMING_FIELD

SESSION_HEADER = "x-session-token"  # llm-d's session-affinity header: carries the true session id
SERVED_HEADERS = ("x-gateway-destination-endpoint-served", "x-served-by", "x-smetric-instance")
ANTHROPIC_VERSION = "2023-06-01"  # the ``anthropic-version`` header the Messages API requires
MAX_RETRY_AFTER_S = 60.0  # the longest a client waits on one Retry-After (model seconds)
Api = Literal["chat", "anthropic"]
APIS: tuple[str, ...] = ("chat", "anthropic")


class ChatClient:
    """One ``aiohttp`` session for a whole replay; ``send`` never raises for HTTP/stream errors."""

    path = "/v1/chat/completions"

    def __init__(
        self,
        base_url: str,
        model: str,
        timeout_s: float = 600.0,
        max_connections: int = 0,
        time_scale: float = 1.0,
    ) -> None:
        self.url = base_url.rstrip("/") + self.path
        # the agents live in model time: a Retry-After of N seconds is N model seconds, N x this
        # wall seconds (the engines' clock; 1.0 = real time)
        self.time_scale = time_scale
        self.model = model
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=10.0)
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        # request id -> how far it got ("sent", "headers", "streaming N chunks"); removed when done.
        # Read after a replay to say where requests that never finished were stuck.
        self.in_flight: dict[str, str] = {}

    async def __aenter__(self) -> ChatClient:
        connector = aiohttp.TCPConnector(limit=self._max_connections, force_close=False)
        self._session = aiohttp.ClientSession(timeout=self._timeout, connector=connector)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    extra_headers: tuple[tuple[str, str], ...] = ()
    max_retries_429 = 8  # resends of a request refused with 429, then its outcome is the 429

    def body(self, spec: SendSpec) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": list(spec.messages),
            "max_tokens": spec.max_tokens,
            "min_tokens": spec.max_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }

    async def send(self, spec: SendSpec) -> Outcome:
        if self._session is None:
            raise RuntimeError("ChatClient used outside 'async with'")
        headers = {
            "content-type": "application/json",
            "x-request-id": spec.request_id,
            SESSION_HEADER: spec.session_id,
            **dict(self.extra_headers),
        }
        payload = orjson.dumps(self.body(spec))
        start = time.perf_counter()
        self.in_flight[spec.request_id] = "sent, no response headers"
        outcome = await self._send(spec, payload, headers, start)  # a cancelled one stays listed
        retries = 0
        # 429 (the picker's flow control): resend after Retry-After, as an agent's client does;
        # TTFT and end-to-end time keep counting from the first send
        while outcome.status == 429 and retries < self.max_retries_429:
            retries += 1
            self.in_flight[spec.request_id] = f"429, retry {retries} after {outcome.retry_after_s:g} model s"
            await asyncio.sleep(min(max(outcome.retry_after_s, 0.0), MAX_RETRY_AFTER_S) * self.time_scale)
            outcome = await self._send(spec, payload, headers, start)
        self.in_flight.pop(spec.request_id, None)
        return dataclasses.replace(outcome, retries_429=retries) if retries else outcome

    async def _send(self, spec: SendSpec, payload: bytes, headers: dict[str, str], start: float) -> Outcome:
        assert self._session is not None
        try:
            async with self._session.post(self.url, data=payload, headers=headers) as resp:
                self.in_flight[spec.request_id] = f"HTTP {resp.status} headers, no data"
                served = next((resp.headers[h] for h in SERVED_HEADERS if h in resp.headers), "")
                if resp.status != 200:
                    text = (await resp.text())[:300]
                    return Outcome(
                        ok=False,
                        status=resp.status,
                        error=text.strip(),
                        served_by=served,
                        retry_after_s=_retry_after_s(resp.headers.get("retry-after", "")),
                    )
                return await self.read(resp, start, served, spec.request_id)
        except (aiohttp.ClientError, TimeoutError, asyncio.IncompleteReadError) as exc:
            return Outcome(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])

    async def read(self, resp: aiohttp.ClientResponse, start: float, served: str, request_id: str) -> Outcome:
        return await _read_stream(resp, start, served, self.in_flight, request_id)


class AnthropicClient(ChatClient):
    """The same replay as Anthropic Messages traffic: ``system`` messages become the top-level
    ``system`` prompt, the rest keep their order; exactly ``max_tokens`` is asked for (the API has
    no ``min_tokens`` / ``ignore_eos``: a real engine may stop earlier, the emulator never does)."""

    path = "/v1/messages"
    extra_headers = (("anthropic-version", ANTHROPIC_VERSION),)

    def body(self, spec: SendSpec) -> dict[str, Any]:
        system = "".join(m["content"] for m in spec.messages if m.get("role") == "system")
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [m for m in spec.messages if m.get("role") != "system"],
            "max_tokens": spec.max_tokens,
            "stream": True,
        }
        if system:
            body["system"] = system
        return body

    async def read(self, resp: aiohttp.ClientResponse, start: float, served: str, request_id: str) -> Outcome:
        return await _read_anthropic_stream(resp, start, served, self.in_flight, request_id)


def make_client(
    api: Api, base_url: str, model: str, timeout_s: float = 600.0, time_scale: float = 1.0
) -> ChatClient:
    """The bench's client for ``--api``; ``time_scale``: wall seconds per model second (a
    Retry-After is waited in model seconds)."""
    if api == "anthropic":
        return AnthropicClient(base_url, model, timeout_s, time_scale=time_scale)
    return ChatClient(base_url, model, timeout_s, time_scale=time_scale)


async def _sse_events(resp: aiohttp.ClientResponse) -> AsyncIterator[tuple[bytes, bytes]]:
    """``(event name, data)`` of each SSE event (the name is ``b""`` without an ``event:`` line)."""
    buf = b""
    async for data in resp.content.iter_any():
        buf += data.replace(b"\r\n", b"\n")
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            name, payload = b"", b""
            for line in event.splitlines():
                if line.startswith(b"event:"):
                    name = line[6:].strip()
                elif line.startswith(b"data:"):
                    payload = line[5:].strip()
            if payload:
                yield name, payload


@dataclass(slots=True)
class _Stream:
    """What a streamed reply has delivered so far, whatever the API."""

    start: float
    served: str
    progress: dict[str, str]
    request_id: str
    ttft: float = float("nan")
    chunks: int = 0
    parts: list[str] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)
    timing: dict[str, Any] = field(default_factory=dict)
    done: bool = False

    def content(self, text: str) -> None:
        """One content chunk: the first sets TTFT; each shows on the progress line."""
        if self.chunks == 0:
            self.ttft = time.perf_counter() - self.start
        self.chunks += 1
        self.progress[self.request_id] = f"streaming, {self.chunks} content chunks"
        self.parts.append(text)

    def failed(self, error: str) -> Outcome:
        return Outcome(ok=False, status=200, error=error, served_by=self.served)

    def finish(self, counts: Callable[[_Stream], tuple[int, int, int]]) -> Outcome:
        """The outcome once the stream ended: ``counts`` gives (output, prompt, cached) tokens from
        the API's usage fields (cached -1: not reported)."""
        e2e = time.perf_counter() - self.start
        if not self.done and self.chunks == 0:
            return self.failed("stream ended without data")
        output, prompt, cached = counts(self)
        return _streamed(
            self.ttft if self.chunks else e2e,
            e2e,
            output,
            prompt,
            cached,
            self.parts,
            self.served,
            self.timing,
        )


async def _read_anthropic_stream(
    resp: aiohttp.ClientResponse, start: float, served: str, progress: dict[str, str], request_id: str
) -> Outcome:
    s = _Stream(start, served, progress, request_id)
    async for _, value in _sse_events(resp):
        try:
            obj = orjson.loads(value)
        except orjson.JSONDecodeError:
            return s.failed(f"bad SSE data: {value[:80]!r}")
        if not isinstance(obj, dict):
            continue
        kind = obj.get("type")
        if kind == "error":
            err = obj.get("error")
            message = err.get("message", "") if isinstance(err, dict) else ""
            return s.failed(f"stream error: {message}"[:300])
        if kind == "message_start" and isinstance(obj.get("message"), dict):
            s.usage.update(obj["message"].get("usage") or {})
        elif kind == "message_delta" and isinstance(obj.get("usage"), dict):
            s.usage.update(obj["usage"])
            if isinstance(obj.get(SERVER_TIMING_FIELD), dict):
                s.timing = obj[SERVER_TIMING_FIELD]
        elif kind == "message_stop":
            s.done = True
        elif kind == "content_block_delta":
            text = (obj.get("delta") or {}).get("text")
            if text:
                s.content(text)
    return s.finish(_anthropic_counts)


def _anthropic_counts(s: _Stream) -> tuple[int, int, int]:
    usage = s.usage
    read = _count(usage.get("cache_read_input_tokens"))
    prompt = _count(usage.get("input_tokens")) + read + _count(usage.get("cache_creation_input_tokens"))
    cached = read if "cache_read_input_tokens" in usage else -1
    return _count(usage.get("output_tokens")) or s.chunks, prompt, cached


def _count(value: Any) -> int:
    """A non-negative token count from the server, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


async def _read_stream(
    resp: aiohttp.ClientResponse, start: float, served: str, progress: dict[str, str], request_id: str
) -> Outcome:
    s = _Stream(start, served, progress, request_id)
    buf = b""
    async for data in resp.content.iter_any():
        buf += data
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.splitlines():
                if not line.startswith(b"data:"):
                    continue
                value = line[5:].strip()
                if value == b"[DONE]":
                    s.done = True
                    continue
                try:
                    obj = orjson.loads(value)
                except orjson.JSONDecodeError:
                    return s.failed(f"bad SSE data: {value[:80]!r}")
                if isinstance(obj.get("usage"), dict):
                    s.usage = obj["usage"]
                if isinstance(obj.get(SERVER_TIMING_FIELD), dict):
                    s.timing = obj[SERVER_TIMING_FIELD]
                for choice in obj.get("choices") or ():
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        s.content(content)
    return s.finish(_openai_counts)


def _openai_counts(s: _Stream) -> tuple[int, int, int]:
    details = s.usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return (
        int(s.usage.get("completion_tokens") or s.chunks),
        int(s.usage.get("prompt_tokens") or 0),
        int(cached) if isinstance(cached, int) else -1,
    )


def _streamed(
    ttft_s: float, e2e_s: float, output_tokens: int, prompt_tokens: int, cached_tokens: int,
    parts: list[str], served: str, timing: dict[str, Any],
) -> Outcome:  # fmt: skip
    """A completed stream's outcome, whatever the API: the client's timing and token counts, and
    the emulator's own timing when it reported one (NaN otherwise)."""
    return Outcome(
        ok=True,
        status=200,
        ttft_s=ttft_s,
        e2e_s=e2e_s,
        output_tokens=output_tokens,
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
        text="".join(parts),
        served_by=served,
        server_ttft_s=_seconds(timing.get("ttft_wall_s")),
        server_e2e_s=_seconds(timing.get("e2e_wall_s")),
        engine_ttft_model_s=_seconds(timing.get("engine_ttft_s")),
        engine_e2e_model_s=_seconds(timing.get("engine_e2e_s")),
    )


def _retry_after_s(value: str) -> float:
    """A Retry-After header in seconds (RFC 9110 10.2.3 delay-seconds; a date or garbage: 1 s)."""
    try:
        return max(0.0, float(value))
    except ValueError:
        return 1.0


def _seconds(value: Any) -> float:
    """A non-negative finite number from the server, else NaN (bad input never crashes)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and 0.0 <= value < 1e9:
        return float(value)
    return float("nan")
