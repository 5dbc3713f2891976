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
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import aiohttp
import orjson
import pytest
from prometheus_client import CollectorRegistry
from tests.integration.test_envoy_picker import Backend, session_body

from smetric.epp.config import parse_config, policy_params
from smetric.epp.datastore import build_datastore
from smetric.epp.envoy import EnvoyOptions, EnvoyProcess, bootstrap, free_port
from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.server.app import PickerServer, build_picker
from smetric.epp.server.servicer import ExtProcServicer, ServicerSettings
from smetric.epp.settings import PickerSettings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HELD = 600
LIMIT = 64


@asynccontextmanager
async def _stack(**envoy: Any) -> AsyncIterator[tuple[str, ExtProcServicer]]:
    """One backend, the picker (admission limit ``LIMIT``, budget 60 s), Envoy with ``envoy``."""
    async with AsyncExitStack() as stack:
        backend = Backend("127.0.0.1")
        await backend.start()
        stack.push_async_callback(backend.stop)
        ds = build_datastore(
            PickerSettings.from_argv(["--endpoints", backend.address, "--refresh-interval-ms", "50"])
        )
        await ds.start()
        stack.push_async_callback(ds.stop)
        cfg = parse_config({"policy": {"name": "smetric"}}, "test")
        picker = build_picker(cfg, policy_params(cfg), ds, ds.index, staleness_s=2.0, is_stale=ds.is_stale)
        settings = ServicerSettings(max_inflight_decisions=LIMIT, decision_budget_s=60.0)
        servicer = ExtProcServicer(picker, PickerMetrics(CollectorRegistry()), settings)
        server = PickerServer(servicer, None, host="127.0.0.1", grpc_port=0, health_port=None)
        await server.start()
        stack.push_async_callback(server.stop, 0)
        opts = EnvoyOptions(
            listen_port=free_port(), admin_port=free_port(), picker_port=server.grpc_port, **envoy
        )
        proc = EnvoyProcess(bootstrap(opts))
        await proc.start()
        stack.push_async_callback(proc.stop)
        while not ds.ready_endpoints():
            await asyncio.sleep(0.05)
        yield f"127.0.0.1:{opts.listen_port}", servicer


async def _partial(address: str, data: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(data)
    await writer.drain()
    return reader, writer


def _stalled_body(address: str) -> bytes:
    prefix = b'{"model":"m","mess'  # 17 bytes of a declared 100 kB body
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n"
        f"content-length: 100000\r\n\r\n"
    ).encode() + prefix[:17]


async def _status(reader: asyncio.StreamReader, timeout_s: float) -> int:
    """The status of the answer, 0 when none came in ``timeout_s``, -1 when the connection closed."""
    try:
        line = await asyncio.wait_for(reader.readline(), timeout_s)
    except TimeoutError:
        return 0
    except ConnectionError:
        return -1
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 else -1


async def test_held_partial_uploads_do_not_starve_complete_requests() -> None:
    async with _stack() as (address, servicer):
        conns = [await _partial(address, _stalled_body(address)) for _ in range(HELD)]
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
    async with _stack(request_headers_timeout_s=1.0) as (address, _):
        reader, writer = await _partial(address, b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
        t0 = time.monotonic()
        status = await _status(reader, 10.0)
        writer.close()
    assert status == 408 and time.monotonic() - t0 < 5.0, status


async def test_a_body_that_never_finishes_gets_408_from_the_gateway() -> None:
    async with _stack(request_timeout_s=2.0) as (address, _):
        reader, writer = await _partial(address, _stalled_body(address))
        t0 = time.monotonic()
        status = await _status(reader, 10.0)
        writer.close()
    assert status == 408 and time.monotonic() - t0 < 6.0, status


async def test_a_listener_holds_at_most_max_connections() -> None:
    async with _stack(max_connections=20) as (address, _):
        conns, refused = [], 0
        for _ in range(30):
            try:
                conns.append(await _partial(address, _stalled_body(address)))
            except ConnectionError:  # closed by the gateway at accept
                refused += 1
            await asyncio.sleep(0.02)
        await asyncio.sleep(1.0)
        statuses = [await _status(reader, 0.2) for reader, _ in conns]
        for _, writer in conns:
            writer.close()
    held = statuses.count(0)
    assert held == 20 and refused + statuses.count(-1) == 10, (held, refused, statuses)
