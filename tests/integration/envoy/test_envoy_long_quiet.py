"""A request whose engine is quiet for a long time (a 100k-token prefill: tens of seconds before the
first byte) keeps its ext_proc stream through real Envoy: the gateway PINGs the picker's connection
every second (``EnvoyOptions.picker_keepalive_s``) and the picker's gRPC server must accept those
PINGs (``smetric.epp.server.app.KEEPALIVE_SERVER_OPTIONS``). With gRPC's default ping policy the
picker closed the connection after ~4 s and every such request got a 500.

``SMETRIC_QUIET_S`` shortens the quiet period for a quick local check (the guard fails at ~4 s)."""

from __future__ import annotations

import asyncio
import os

import aiohttp
import orjson
import pytest

from tests.support.envoy_stack import Stack, make_stack, session_body

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUIET_S = float(os.environ.get("SMETRIC_QUIET_S", "60"))


async def _post(s: Stack, client: aiohttp.ClientSession, sid: str, stream: bool) -> tuple[int, bytes]:
    async with client.post(
        s.url + "/v1/chat/completions", data=orjson.dumps(session_body(sid, 0, stream=stream))
    ) as r:
        return r.status, await r.read()


async def test_requests_quiet_for_a_minute_get_their_200() -> None:
    """Non-streaming, and streaming before its first token, both quiet for ``QUIET_S`` seconds."""
    async for s in make_stack():
        for b in s.backends:
            b.held = asyncio.Event()
        timeout = aiohttp.ClientTimeout(total=QUIET_S + 60)
        async with aiohttp.ClientSession(timeout=timeout) as client:
            tasks = [
                asyncio.create_task(_post(s, client, "quiet-plain", False)),
                asyncio.create_task(_post(s, client, "quiet-stream", True)),
            ]
            await asyncio.sleep(QUIET_S)
            assert not any(t.done() for t in tasks), [t.result() for t in tasks if t.done()]
            for b in s.backends:
                b.held.set()
            (plain_status, plain), (sse_status, sse) = await asyncio.gather(*tasks)
        assert plain_status == 200, plain[:300]
        assert orjson.loads(plain)["served_by"]
        assert sse_status == 200, sse[:300]
        assert sse.endswith(b"data: [DONE]\n\n")
