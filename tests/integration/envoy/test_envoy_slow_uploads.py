"""Slow clients through real Envoy and the picker's real gRPC server.

* 600 uploads that stop after 17 bytes of a declared 100 kB body are held open while 10 normal
  requests all get 200: the picker counts a request against ``--max-inflight-decisions`` only once
  its body is complete (counted from the headers, the 600 fill a limit of 64 and the 10 get 503).
* The gateway's own bounds (``EnvoyOptions``): headers that never finish get 408 after
  ``request_headers_timeout_s``; a body that never finishes gets 408 after ``request_timeout_s``
  (the picker's decision budget set longer here, so the gateway's bound is the one seen); a
  listener holds at most ``max_connections`` connections."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson
import pytest

from tests.support.envoy_stack import one_backend_stack, session_body
from tests.support.raw_http import read_status, send_raw

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HELD = 600
LIMIT = 64


def _stalled_body(address: str) -> bytes:
    prefix = b'{"model":"m","mess'  # 17 bytes of a declared 100 kB body
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n"
        f"content-length: 100000\r\n\r\n"
    ).encode() + prefix[:17]


async def test_held_partial_uploads_do_not_starve_complete_requests() -> None:
    async with one_backend_stack(LIMIT) as (address, servicer):
        conns = [await send_raw(address, _stalled_body(address)) for _ in range(HELD)]
        deadline = time.monotonic() + 30
        while servicer.metrics.active_streams._value.get() < HELD and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert servicer.metrics.active_streams._value.get() >= HELD  # all held at the picker
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as client:

            async def normal(i: int) -> int:
                body = orjson.dumps(session_body(f"normal-{i}", 0))
                async with client.post(f"http://{address}/v1/chat/completions", data=body) as r:
                    await r.read()
                    return r.status

            statuses = await asyncio.gather(*(normal(i) for i in range(10)))
        still_open = sum(1 for reader, _ in conns if not reader.at_eof())
        for _, writer in conns:
            writer.close()
    assert statuses == [200] * 10, statuses
    assert still_open == HELD


async def test_headers_that_never_finish_get_408() -> None:
    async with one_backend_stack(request_headers_timeout_s=1.0) as (address, _):
        reader, writer = await send_raw(address, b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
        t0 = time.monotonic()
        status = await read_status(reader, 10.0)
        writer.close()
    assert status == 408 and time.monotonic() - t0 < 5.0, status


async def test_a_body_that_never_finishes_gets_408_from_the_gateway() -> None:
    async with one_backend_stack(request_timeout_s=2.0) as (address, _):
        reader, writer = await send_raw(address, _stalled_body(address))
        t0 = time.monotonic()
        status = await read_status(reader, 10.0)
        writer.close()
    assert status == 408 and time.monotonic() - t0 < 6.0, status


async def test_a_listener_holds_at_most_max_connections() -> None:
    async with one_backend_stack(max_connections=20) as (address, _):
        conns, refused = [], 0
        for _ in range(30):
            try:
                conns.append(await send_raw(address, _stalled_body(address)))
            except ConnectionError:  # closed by the gateway at accept
                refused += 1
            await asyncio.sleep(0.02)
        await asyncio.sleep(1.0)
        statuses = [await read_status(reader, 0.2) for reader, _ in conns]
        for _, writer in conns:
            writer.close()
    held = statuses.count(0)
    assert held == 20 and refused + statuses.count(-1) == 10, (held, refused, statuses)
