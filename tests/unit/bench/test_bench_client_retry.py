"""The bench's client resends a request refused with 429 after its Retry-After (flow control), as
an agent's client does, a bounded number of times; TTFT counts from the first send."""

from __future__ import annotations

import time

from aiohttp import web

from smetric.bench.client import ChatClient
from smetric.bench.replay import SendSpec

SPEC = SendSpec("r1", "s1", "f1", 0, ({"role": "user", "content": "hi"},), 4, 0)


async def serve(refusals: int, retry_after: str = "0") -> tuple[web.AppRunner, str, list[float]]:
    calls: list[float] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        calls.append(time.monotonic())
        if len(calls) <= refusals:
            return web.Response(status=429, text="flow control", headers={"retry-after": retry_after})
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices":[{"delta":{"content":"ok"}}]}\n\n')
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}", calls


async def test_a_429_is_retried_after_retry_after_and_then_served() -> None:
    runner, url, calls = await serve(refusals=2)
    try:
        async with ChatClient(url, "m") as client:
            out = await client.send(SPEC)
        assert out.ok and out.retries_429 == 2 and len(calls) == 3
    finally:
        await runner.cleanup()


async def test_retries_are_bounded() -> None:
    runner, url, calls = await serve(refusals=100)
    try:
        async with ChatClient(url, "m") as client:
            out = await client.send(SPEC)
        assert not out.ok and out.status == 429
        assert len(calls) == 1 + ChatClient.max_retries_429
    finally:
        await runner.cleanup()


async def test_retry_after_is_waited_in_model_seconds() -> None:
    """The agents live in model time: Retry-After 5 at time scale 0.02 is a 0.1 s wall wait (in
    real time it would be 5 s; unscaled, at time x0.002 it was 2,500 model seconds)."""
    runner, url, calls = await serve(refusals=1, retry_after="5")
    try:
        async with ChatClient(url, "m", time_scale=0.02) as client:
            out = await client.send(SPEC)
        assert out.ok and out.retries_429 == 1
        assert 0.09 <= calls[1] - calls[0] < 1.0
    finally:
        await runner.cleanup()
