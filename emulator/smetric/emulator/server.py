"""aiohttp front end of one emulated instance: vLLM's OpenAI routes, ``/health``, ``/metrics``,
and the test-only ``/admin/fault``."""

from __future__ import annotations

import asyncio
import time
import uuid
from concurrent.futures import Executor
from typing import Any, Literal

import orjson
from aiohttp import web

from smetric.emulator import sse
from smetric.emulator.agent_api import AgentRoutes, error_response
from smetric.emulator.faults import FaultState
from smetric.emulator.instance import EmulatedInstance, RequestHandle
from smetric.emulator.metrics import CONTENT_TYPE
from smetric.emulator.prompt import PreparedPrompt, PreparedRequest, Prompter
from smetric.emulator.protocol import (
    SERVER_TIMING_FIELD,
    ApiError,
    ChatRequest,
    CompletionRequest,
    ResponseShaper,
    completion_input,
    parse_request,
)

_JSON = "application/json"


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type=_JSON)


_error = error_response


class InstanceServer:
    """HTTP routes of one instance. The instance's driver task runs the engine; this only
    validates, submits, and relays tokens as they are produced."""

    def __init__(
        self,
        instance: EmulatedInstance,
        prompter: Prompter,
        model: str,
        context_tokens: int,
        executor: Executor | None = None,
    ) -> None:
        self.instance = instance
        self.prompter = prompter
        self.model = model
        self.context_tokens = context_tokens
        self.faults: FaultState = instance.faults
        self.executor = executor  # None = the loop's default thread pool

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions/render", self.render_chat)
        app.router.add_post("/v1/completions/render", self.render_completion)
        agents = AgentRoutes(self)
        app.router.add_post("/v1/messages", agents.messages)
        app.router.add_post("/v1/messages/count_tokens", agents.count_tokens)
        app.router.add_post("/v1/responses", agents.responses)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache)
        app.router.add_get("/admin/fault", self.get_fault)
        app.router.add_post("/admin/fault", self.set_fault)
        return app

    # ------------------------------------------------------------------ small routes
    async def health(self, _: web.Request) -> web.Response:
        if self.faults.dead:
            return web.Response(status=503)
        return web.Response(status=200)

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=self.instance.render_metrics(), headers={"Content-Type": CONTENT_TYPE})

    async def models(self, _: web.Request) -> web.Response:
        if self.faults.dead:
            return _error(ApiError(503, "engine is dead"))
        card = {
            "id": self.model,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "vllm",
            "root": self.model,
            "parent": None,
            "max_model_len": self.context_tokens,
            "permission": [],
        }
        return _json({"object": "list", "data": [card]})

    async def reset_prefix_cache(self, _: web.Request) -> web.Response:
        if not self.instance.reset_prefix_cache():
            return _error(ApiError(503, "cannot reset the prefix cache while requests are running"))
        return web.Response(status=200)

    async def get_fault(self, _: web.Request) -> web.Response:
        return _json(self.faults.as_dict())

    async def set_fault(self, request: web.Request) -> web.Response:
        try:
            self.faults.apply(orjson.loads(await request.read()))
        except (orjson.JSONDecodeError, ValueError) as exc:
            return _error(ApiError(400, f"bad fault spec: {exc}"))
        self.instance.fault_changed()
        return _json(self.faults.as_dict())

    # ------------------------------------------------------------------ render (vLLM >= 0.31)
    async def render_chat(self, request: web.Request) -> web.Response:
        return await self._render(request, "chat")

    async def render_completion(self, request: web.Request) -> web.Response:
        return await self._render(request, "completion")

    async def _render(self, request: web.Request, kind: Literal["chat", "completion"]) -> web.Response:
        """vLLM's render routes (``vllm serve``: ``POST /v1/chat/completions/render`` and
        ``/v1/completions/render``): the prompt's token ids as the engine would see them, in the
        generate request's shape (``token_ids``, ``features``), with nothing scheduled. A router that
        matches prefixes on token ids asks for them (vllm-router's ``cache_aware`` and ``kv_aware``
        with HTTP workers: docs/bench.md, "The peer router")."""
        try:
            if self.faults.dead:
                raise ApiError(503, "engine is dead")
            raw = await request.read()
            loop = asyncio.get_running_loop()
            req, prepared = await loop.run_in_executor(self.executor, self._parse_and_prepare, kind, raw)
        except ApiError as exc:
            return _error(exc)
        ids = list(prepared.prompt.token_ids)
        return _json({"model": self.model, "token_ids": ids, "features": None, "stream": req.stream})

    # ------------------------------------------------------------------ generation
    def check_faults(self) -> None:
        """Refuse a generation request at once when the instance is dead or told to error."""
        if self.faults.dead:
            raise ApiError(503, "engine is dead")
        if self.faults.erroring:
            f = self.faults
            raise ApiError(f.status, f"injected fault: HTTP {f.status}", retry_after_s=f.retry_after_s)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completion")

    def _parse_and_prepare(
        self, kind: Literal["chat", "completion"], raw: bytes
    ) -> tuple[ChatRequest | CompletionRequest, PreparedRequest]:
        """Decode, validate, render, tokenize and hash. Pure, so it runs in a worker thread: a
        100k-token prompt does not stall the other instances' drivers on the event loop."""
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"malformed JSON body: {exc}") from None
        req = parse_request(kind, body)
        if req.model and req.model != self.model:
            raise ApiError(404, f"The model `{req.model}` does not exist.", "model")
        return req, self._prepare(req)

    def _prepare(self, req: ChatRequest | CompletionRequest) -> PreparedRequest:
        if isinstance(req, ChatRequest):
            prompt = self.prompter.chat([m.model_dump() for m in req.messages])
        else:
            prompt = self.prompter.completion(completion_input(req.prompt))
        param = "messages" if isinstance(req, ChatRequest) else "prompt"
        return self.prepare_prompt(prompt, req.output_tokens, param)

    def prepare_prompt(self, prompt: PreparedPrompt, output_tokens: int, param: str) -> PreparedRequest:
        """Check a rendered prompt against the context and the KV cache (400s), then tokens + hashes
        of prompt + answer. Every API route ends here, so they share limits and block hashes."""
        total = prompt.num_tokens + output_tokens
        if prompt.num_tokens == 0:
            raise ApiError(400, "the prompt is empty", param)
        if total > self.context_tokens:
            raise ApiError(
                400,
                f"This model's maximum context length is {self.context_tokens} tokens. However, you "
                f"requested {total} tokens ({prompt.num_tokens} in the messages, "
                f"{output_tokens} in the completion). Please reduce the length of the messages "
                "or completion.",
            )
        self.instance.check_fits(total)
        return self.prompter.request(prompt, output_tokens)

    async def _generate(
        self, request: web.Request, kind: Literal["chat", "completion"]
    ) -> web.StreamResponse:
        received = asyncio.get_running_loop().time()
        try:
            self.check_faults()
            raw = await request.read()
            loop = asyncio.get_running_loop()
            req, prepared = await loop.run_in_executor(self.executor, self._parse_and_prepare, kind, raw)
            request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
            handle = self.instance.submit(prepared, request_id, received)
        except ApiError as exc:
            return _error(exc)
        shaper = ResponseShaper(kind, handle.request_id, self.model)
        try:
            if req.stream:
                return await self._stream(request, handle, shaper, req.include_usage, received)
            return await self._full(handle, shaper)
        finally:
            # Normal completion is a no-op; a client disconnect (handler cancelled, or a write to a
            # closed transport) aborts the request and releases its KV blocks.
            self.instance.abort(handle)

    async def _full(self, handle: RequestHandle, shaper: ResponseShaper) -> web.Response:
        n = await self._drain(handle)
        if n < handle.output_tokens:
            return _error(ApiError(503, "request aborted: the engine stopped serving it"))
        text = self.prompter.filler_text(n)
        return _json(shaper.full(text, handle.prompt.num_tokens, n, handle.cached_tokens))

    async def _drain(self, handle: RequestHandle) -> int:
        n = 0
        while await handle.tokens.get() is not None:
            n += 1
        return n

    async def _stream(
        self,
        request: web.Request,
        handle: RequestHandle,
        shaper: ResponseShaper,
        include_usage: bool,
        received: float,
    ) -> web.StreamResponse:
        first = await handle.tokens.get()  # headers go out with the first token, as vLLM's do
        if first is None:  # aborted before its first token (the instance turned dead)
            return _error(ApiError(503, "request aborted: the engine stopped serving it"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        loop = asyncio.get_running_loop()
        n = 0
        first_written = last_written = received
        k: int | None = first
        while k is not None:
            n += 1
            last = n == handle.output_tokens
            piece = self.prompter.filler_piece(k)
            await resp.write(sse.frame(shaper.chunk(piece, "length" if last else None, first=n == 1)))
            last_written = loop.time()
            if n == 1:
                first_written = last_written
            k = await handle.tokens.get()
        if n < handle.output_tokens:  # aborted by the engine (instance turned dead)
            await resp.write(sse.frame(ApiError(503, "request aborted").body()))
        elif include_usage:
            body = shaper.usage_chunk(handle.prompt.num_tokens, n, handle.cached_tokens)
            # The emulator's own view of this request: wall seconds since it arrived here, and the
            # modelled engine time (model seconds); lets a client split its latency into engine
            # time (scaled) and router + network + emulator overhead (not).
            body[SERVER_TIMING_FIELD] = {
                "ttft_wall_s": first_written - received,
                "e2e_wall_s": last_written - received,
                "engine_ttft_s": handle.engine_ttft_s,  # modelled, engine (model) seconds
                "engine_e2e_s": handle.engine_e2e_s,
            }
            await resp.write(sse.frame(body))
        await resp.write(sse.DONE)
        await resp.write_eof()
        return resp


async def start_servers(
    servers: list[tuple[InstanceServer, str, int]],
) -> list[web.AppRunner]:
    """Start one aiohttp site per instance; handler cancellation on disconnect is enabled so an
    abandoned request is aborted at once."""
    runners: list[web.AppRunner] = []
    for server, host, port in servers:
        runner = web.AppRunner(server.app(), handler_cancellation=True, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host, port, reuse_address=True).start()
        runners.append(runner)
    return runners


async def stop_servers(runners: list[web.AppRunner]) -> None:
    await asyncio.gather(*(r.cleanup() for r in runners), return_exceptions=True)
