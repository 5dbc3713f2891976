"""The agents' own APIs on an emulated instance: Anthropic Messages (``/v1/messages``,
:mod:`smetric.emulator.anthropic_api`) and OpenAI Responses (``/v1/responses``,
:mod:`smetric.emulator.responses_api`).

Both run on the same instance as chat completions: the request is rendered to chat messages
(the list the picker's precise index renders), checked and hashed by
:meth:`InstanceServer.prepare_prompt`, and submitted to the same engine, so prefix hits, KV events
and ``/metrics`` are those of a chat request with the same conversation. Only the wire shape
differs; each API module owns its shape (:class:`Shaper`).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any, Literal, Protocol

import orjson
from aiohttp import web
from pydantic import BaseModel, ValidationError

from smetric.emulator import anthropic_api, sse
from smetric.emulator.anthropic_api import AnthropicShaper, CountTokensRequest, MessagesRequest
from smetric.emulator.prompt import PreparedRequest
from smetric.emulator.protocol import ApiError, BodyError, UsageFacts
from smetric.emulator.responses_api import ResponsesRequest, ResponsesShaper, ResponseStore

if TYPE_CHECKING:
    from smetric.emulator.instance import RequestHandle
    from smetric.emulator.server import InstanceServer

AgentApi = Literal["anthropic", "responses"]
BodyKind = Literal["anthropic", "responses", "count_tokens"]
_ABORTED = "request aborted: the engine stopped serving it"


def error_response(exc: ApiError, body: dict[str, Any] | None = None) -> web.Response:
    """The error's JSON answer (vLLM's OpenAI body unless ``body`` is given) with its headers."""
    return web.Response(
        body=orjson.dumps(exc.body() if body is None else body),
        status=exc.status,
        content_type="application/json",
        headers=exc.headers,
    )


class AgentRequest(Protocol):
    @property
    def model(self) -> str: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def streaming(self) -> bool: ...
    def render_messages(self) -> list[dict[str, Any]]: ...


class Shaper(Protocol):
    """Wire shape of one request: bodies, stream events and errors of its API."""

    @property
    def opens_early(self) -> bool:
        """``True``: the stream's first events go out before the first token (Responses)."""
        ...

    def error_body(self, exc: ApiError) -> dict[str, Any]: ...
    def opening(self, u: UsageFacts) -> list[dict[str, Any]]: ...
    def first(self, u: UsageFacts) -> list[dict[str, Any]]: ...
    def delta(self, text: str) -> dict[str, Any]: ...
    def closing(self, u: UsageFacts, timing: dict[str, Any], text: str = "") -> list[dict[str, Any]]: ...
    def failure(self, message: str) -> dict[str, Any]: ...
    def full(self, text: str, u: UsageFacts) -> dict[str, Any]: ...


def parse(api: BodyKind, raw: bytes) -> AgentRequest:
    """Decode and validate; raises :class:`BodyError` (400) with pydantic's reason."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BodyError(400, f"malformed JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise BodyError(400, "request body must be a JSON object")
    kinds: dict[str, type[BaseModel]] = {
        "anthropic": MessagesRequest,
        "responses": ResponsesRequest,
        "count_tokens": CountTokensRequest,
    }
    model = kinds[api]
    try:
        req: AgentRequest = model.model_validate(body)  # type: ignore[assignment]
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or None
        raise BodyError(400, f"invalid request: {where}: {first.get('msg')}", where) from None
    return req


def error_for(api: AgentApi, exc: ApiError) -> web.Response:
    """A refused request in its API's shape: Anthropic's envelope for the handler's own errors on
    ``/v1/messages``; vLLM's OpenAI body for Responses and for bodies that fail validation."""
    if api == "anthropic" and not isinstance(exc, BodyError):
        return error_response(exc, anthropic_api.error_body(exc))
    return error_response(exc)


class AgentRoutes:
    """``/v1/messages`` and ``/v1/responses`` handlers of one :class:`InstanceServer`."""

    def __init__(self, server: InstanceServer) -> None:
        self.server = server
        self.stored = ResponseStore()  # the responses this instance holds (previous_response_id)

    async def messages(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "anthropic")

    async def responses(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "responses")

    async def count_tokens(self, request: web.Request) -> web.Response:
        """``/v1/messages/count_tokens``: the prompt's token count as a generation would see it."""
        server = self.server
        loop = asyncio.get_running_loop()
        try:
            server.check_faults()
            raw = await request.read()
            n = await loop.run_in_executor(server.executor, self._count, raw)
        except ApiError as exc:
            return error_for("anthropic", exc)
        return web.Response(
            body=orjson.dumps(anthropic_api.count_tokens_body(n)), content_type="application/json"
        )

    def _count(self, raw: bytes) -> int:
        req = parse("count_tokens", raw)
        if req.model and req.model != self.server.model:
            raise ApiError(404, f"The model `{req.model}` does not exist.", "model")
        return self.server.prompter.chat(req.render_messages()).num_tokens

    def _prepare(self, api: AgentApi, raw: bytes) -> tuple[AgentRequest, PreparedRequest]:
        req = parse(api, raw)
        server = self.server
        if req.model and req.model != server.model:
            raise ApiError(404, f"The model `{req.model}` does not exist.", "model")
        param = "messages" if api == "anthropic" else "input"
        prompt = server.prompter.chat(req.render_messages())
        return req, server.prepare_prompt(prompt, req.output_tokens, param)

    async def _handle(self, request: web.Request, api: AgentApi) -> web.StreamResponse:
        server = self.server
        loop = asyncio.get_running_loop()
        received = loop.time()
        request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
        try:
            server.check_faults()
            raw = await request.read()
            req, prepared = await loop.run_in_executor(server.executor, self._prepare, api, raw)
            if isinstance(req, ResponsesRequest):
                self.stored.check(req)
            handle = server.instance.submit(prepared, request_id, received)
        except ApiError as exc:
            return error_for(api, exc)
        shaper: Shaper
        if isinstance(req, ResponsesRequest):
            shaper = ResponsesShaper(request_id, server.model, req)
        else:
            shaper = AnthropicShaper(request_id, server.model)
        try:
            if req.streaming:
                return await self._stream(request, handle, shaper, received)
            return await self._full(handle, shaper)
        finally:
            server.instance.abort(handle)  # no-op when finished; a client gone aborts the request

    def _store(self, shaper: Shaper) -> None:
        if isinstance(shaper, ResponsesShaper) and shaper.stores:
            self.stored.add(shaper.id)

    def _usage(self, handle: RequestHandle, n: int) -> UsageFacts:
        block = self.server.instance.engine.config.block_tokens
        return UsageFacts.of(handle.prompt.num_tokens, n, handle.cached_tokens, block)

    async def _full(self, handle: RequestHandle, shaper: Shaper) -> web.Response:
        n = 0
        while await handle.tokens.get() is not None:
            n += 1
        if n < handle.output_tokens:
            exc = ApiError(503, _ABORTED)
            return error_response(exc, shaper.error_body(exc))
        text = self.server.prompter.filler_text(n)
        self._store(shaper)
        return web.Response(
            body=orjson.dumps(shaper.full(text, self._usage(handle, n))), content_type="application/json"
        )

    async def _stream(
        self, request: web.Request, handle: RequestHandle, shaper: Shaper, received: float
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        started = self._usage(handle, 0)
        if shaper.opens_early:
            await resp.prepare(request)
            await resp.write(b"".join(sse.event_frame(e) for e in shaper.opening(started)))
        first = await handle.tokens.get()  # vLLM's Anthropic stream opens with the first token
        if first is None:
            exc = ApiError(503, _ABORTED)
            if not shaper.opens_early:
                return error_response(exc, shaper.error_body(exc))
            await resp.write(sse.event_frame(shaper.failure(exc.message)))
            await resp.write_eof()
            return resp
        if not shaper.opens_early:
            await resp.prepare(request)
        loop = asyncio.get_running_loop()
        prompter = self.server.prompter
        head = b"".join(sse.event_frame(e) for e in shaper.first(self._usage(handle, 0)))
        n = 0
        first_written = last_written = received
        pieces: list[str] = []
        k: int | None = first
        while k is not None:
            n += 1
            piece = prompter.filler_piece(k)
            pieces.append(piece)
            frame = sse.event_frame(shaper.delta(piece))
            await resp.write(head + frame if n == 1 else frame)
            last_written = loop.time()
            if n == 1:
                first_written = last_written
            k = await handle.tokens.get()
        if n < handle.output_tokens:
            await resp.write(sse.event_frame(shaper.failure(_ABORTED)))
        else:
            timing = {
                "ttft_wall_s": first_written - received,
                "e2e_wall_s": last_written - received,
                "engine_ttft_s": handle.engine_ttft_s,
                "engine_e2e_s": handle.engine_e2e_s,
            }
            tail = shaper.closing(self._usage(handle, n), timing, "".join(pieces))
            self._store(shaper)
            await resp.write(b"".join(sse.event_frame(e) for e in tail))
        await resp.write_eof()
        return resp
