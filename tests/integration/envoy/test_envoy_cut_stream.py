"""A stream cut by an engine kill, as the agents' own SDKs see it: the real ``openai`` and
``anthropic`` clients through a real Envoy (ORIGINAL_DST and pool cluster), the real `smetric-epp`
process and `smetric emulate`, SIGKILLed while a Chat Completions, a Messages and a Responses stream
are each mid-response -- or, with the engines still up, told to stop serving (their running
requests aborted).

Envoy cannot add an SSE ``error`` event to a stream whose upstream reset after the response
started: its router resets the downstream stream (the client reads a chunked body that never ends
with its zero-length chunk, or an HTTP/2 RST_STREAM), the ext_proc filter is destroyed with the
stream (no message tells the picker) and an ImmediateResponse after the response headers is
ignored. So the guard is that reset: each SDK must raise, never end as if the answer were complete.
The last test shows why: a stream that ends cleanly without its closing event is accepted by the
SDKs as a finished answer. An engine that stays up ends an aborted stream with its API's error
event, which reaches the SDKs through the gateway and the picker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from aiohttp import web
from openai.types.responses import ResponseCompletedEvent

from smetric.epp.envoy import EnvoyOptions, EnvoyProcess, bootstrap, free_port
from tests.support.agent_stack import emulated_engines, picker_stack

pytestmark = pytest.mark.integration

N = 3
MODEL = "emu/agent-model"
LONG = 4000  # output tokens: the streams are still running when the engines die
SEEN_BEFORE_KILL = 3  # content events each stream has delivered when the engines are killed
TRANSPORT_ERRORS = ("APIConnectionError", "RemoteProtocolError")


class Outcome:
    def __init__(self) -> None:
        self.events = 0
        self.finished = False  # the API's closing event ([DONE] / message_stop / response.completed)
        self.error: BaseException | None = None
        self.error_events: list[str] = []  # Responses API error events handed to the caller
        self.before_cut = 0
        self.started = asyncio.Event()


async def _read(out: Outcome, consume: Callable[[Outcome], Awaitable[None]]) -> None:
    try:
        await consume(out)
    except Exception as exc:  # what the SDK raised is the observation
        out.error = exc
    finally:
        out.started.set()


def _count(out: Outcome) -> None:
    out.events += 1
    if out.events >= SEEN_BEFORE_KILL:
        out.started.set()


def _consumers(url: str) -> dict[str, Callable[[Outcome], Awaitable[None]]]:
    gpt = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=60)
    claude = anthropic.AsyncAnthropic(base_url=url, api_key="x", max_retries=0, timeout=60)
    prompt = "Refactor the parser and explain every step. " * 20

    async def chat(out: Outcome) -> None:
        stream = await gpt.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=LONG, stream=True
        )
        async for chunk in stream:
            _count(out)
            if chunk.choices and chunk.choices[0].finish_reason is not None:
                out.finished = True

    async def messages(out: Outcome) -> None:
        async with claude.messages.stream(
            model=MODEL, max_tokens=LONG, messages=[{"role": "user", "content": prompt}]
        ) as stream:
            async for event in stream:
                _count(out)
                out.finished = out.finished or event.type == "message_stop"
            await stream.get_final_message()

    async def responses(out: Outcome) -> None:
        stream = await gpt.responses.create(model=MODEL, input=prompt, max_output_tokens=LONG, stream=True)
        async for event in stream:
            _count(out)
            out.finished = out.finished or isinstance(event, ResponseCompletedEvent)
            if event.type in ("error", "response.failed"):
                out.error_events.append(event.type)

    return {"chat": chat, "messages": messages, "responses": responses}


@asynccontextmanager
async def _streams_cut_by(
    tmp_path: Path, pool: bool, cut: Callable[[asyncio.subprocess.Process, int], Awaitable[None]]
) -> AsyncIterator[dict[str, Outcome]]:
    """Three emulated engines, the picker and Envoy; a Chat Completions, a Messages and a Responses
    stream each read until it delivered a few events, then ``cut(emulator, first_port)``; yields
    the outcomes once every stream ended."""
    outcomes = {name: Outcome() for name in ("chat", "messages", "responses")}
    async with (
        emulated_engines(N, MODEL, 0.2) as (emu, port, engines),
        picker_stack(tmp_path, engines, pool=pool) as stack,
    ):
        await asyncio.sleep(0.5)  # first scrapes
        consumers = _consumers(stack.url)
        tasks = [asyncio.create_task(_read(outcomes[n], consumers[n])) for n in outcomes]
        await asyncio.wait_for(asyncio.gather(*(o.started.wait() for o in outcomes.values())), 60)
        for o in outcomes.values():
            o.before_cut = o.events
        await cut(emu, port)
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    for name, out in outcomes.items():
        assert out.before_cut >= SEEN_BEFORE_KILL, (name, out.before_cut, out.error)  # mid-response
        assert not out.finished, name
    yield outcomes


async def _sigkill(emu: asyncio.subprocess.Process, port: int) -> None:
    emu.kill()  # every engine dies mid-response
    await emu.wait()


async def _abort(emu: asyncio.subprocess.Process, port: int) -> None:
    """The engines stay up and stop serving (the emulator's ``dead`` fault: running requests are
    aborted), as vLLM does when its engine core fails under a live API server."""
    async with aiohttp.ClientSession() as http:
        for i in range(N):
            async with http.post(f"http://127.0.0.1:{port + i}/admin/fault", json={"mode": "dead"}) as r:
                assert r.status == 200, await r.text()


UPSTREAMS = pytest.mark.parametrize("pool", [False, True], ids=["original_dst", "pool"])


@UPSTREAMS
async def test_an_engine_kill_mid_stream_raises_in_every_sdk(tmp_path: Path, pool: bool) -> None:
    async with _streams_cut_by(tmp_path, pool, _sigkill) as outcomes:
        for name, out in outcomes.items():
            assert out.error is not None, f"{name}: the cut stream ended without an error ({out.events})"
            # a transport error, not a status: openai wraps it in APIConnectionError, anthropic
            # raises its HTTP client's RemoteProtocolError ("incomplete chunked read") as it is
            assert type(out.error).__name__ in TRANSPORT_ERRORS, (name, repr(out.error))


@UPSTREAMS
async def test_an_engine_abort_mid_stream_reaches_every_sdk_as_its_error_event(
    tmp_path: Path, pool: bool
) -> None:
    """An engine that stays up ends an aborted stream with its API's error event, and the gateway
    and the picker pass it through: Chat Completions' ``{"error": ...}`` chunk and Messages'
    ``event: error`` make the SDKs raise; the Responses ``error`` event is handed to the caller as
    an event (the openai SDK raises only on an ``error`` key)."""
    async with _streams_cut_by(tmp_path, pool, _abort) as outcomes:
        chat, messages, responses = outcomes["chat"], outcomes["messages"], outcomes["responses"]
        assert isinstance(chat.error, openai.APIError), repr(chat.error)
        assert not isinstance(chat.error, openai.APIConnectionError), repr(chat.error)
        assert isinstance(messages.error, anthropic.APIStatusError), repr(messages.error)
        assert "internal_error" in str(messages.error), repr(messages.error)
        assert responses.error is None and responses.error_events == ["error"], responses.error_events


async def _truncated_sse(request: web.Request) -> web.StreamResponse:
    """A server that ends its stream cleanly after three events, without the closing one."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for i in range(3):
        if request.path.endswith("/messages"):
            await resp.write(_messages_event(i))
        else:
            data = (
                '{"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":'
                f'[{{"index":0,"delta":{{"content":"part {i} "}},"finish_reason":null}}]}}'
            )
            await resp.write(f"data: {data}\n\n".encode())
    await resp.write_eof()
    return resp


def _messages_event(i: int) -> bytes:
    if i == 0:
        return (
            b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","type":"message",'
            b'"role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,'
            b'"usage":{"input_tokens":1,"output_tokens":0}}}\n\n'
        )
    if i == 1:
        return (
            b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
            b'"content_block":{"type":"text","text":""}}\n\n'
        )
    return (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"part"}}\n\n'
    )


@asynccontextmanager
async def _direct_envoy(backend_port: int) -> AsyncIterator[str]:
    opts = EnvoyOptions(
        listen_port=free_port(),
        admin_port=free_port(),
        picker_port=free_port(),  # unused: the direct listener has no picker
        direct_port=free_port(),
        direct_backend=f"127.0.0.1:{backend_port}",
    )
    async with EnvoyProcess(bootstrap(opts)):
        yield f"http://127.0.0.1:{opts.direct_port}"


async def test_a_clean_end_without_the_closing_event_is_taken_as_complete() -> None:
    """What the reset protects against: were the cut a clean end, the SDKs would not notice."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _truncated_sse)
    app.router.add_post("/v1/messages", _truncated_sse)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with _direct_envoy(port) as url:
            gpt = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=30)
            stream = await gpt.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            chunks: list[Any] = [c async for c in stream]
            assert len(chunks) == 3 and chunks[-1].choices[0].finish_reason is None  # no error raised
            claude = anthropic.AsyncAnthropic(base_url=url, api_key="x", max_retries=0, timeout=30)
            async with claude.messages.stream(
                model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            ) as s:
                events = [e.type async for e in s]
            assert "message_stop" not in events and events[0] == "message_start"  # no error raised
    finally:
        await runner.cleanup()
