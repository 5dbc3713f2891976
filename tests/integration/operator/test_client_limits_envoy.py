"""The Istio EnvoyFilter that gateway.clientLimits renders, applied the way istiod applies it (MERGE
into the gateway's HTTP connection manager, INSERT_FIRST of a network filter) to a gateway-like
listener of a real Envoy: Envoy accepts the patched fields, and they do what docs/operator.md says.

* headers that never finish get 408 after ``requestHeadersTimeoutS``, a body that never finishes
  gets 408 after ``requestTimeoutS``;
* ``requestTimeoutS`` bounds the upload only: a complete request whose response is quiet for
  longer (a long prefill) still gets its 200;
* at most ``maxConnections`` connections are held; the next one is closed at accept;
* an HTTP/2 client is told ``maxConcurrentStreams`` in the gateway's SETTINGS frame.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from smetric.epp.envoy.process import EnvoyProcess, free_port
from smetric.operator.render_client_limits import HCM, HCM_TYPE
from tests.support.operator_render import by_name, render, spec
from tests.support.raw_http import read_status, send_raw

pytestmark = pytest.mark.integration

QUIET_S = 2.5  # the upstream's silence before it answers: longer than requestTimeoutS
LIMITS = {"requestHeadersTimeoutS": 1, "requestTimeoutS": 1, "maxConnections": 2, "maxConcurrentStreams": 3}
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS, MAX_CONCURRENT_STREAMS = 0x4, 0x3
ROUTER = {
    "name": "envoy.filters.http.router",
    "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
}


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in patch.items():
        out[key] = (
            _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def _patched_listener(port: int, upstream: str, patches: list[dict[str, Any]]) -> dict[str, Any]:
    """A gateway listener (HCM routing to one upstream, no route timeout), then the patches."""
    hcm: dict[str, Any] = {
        "name": HCM,
        "typed_config": {
            "@type": HCM_TYPE,
            "stat_prefix": "gateway",
            "route_config": {
                "virtual_hosts": [
                    {
                        "name": "all",
                        "domains": ["*"],
                        "routes": [
                            {"match": {"prefix": "/"}, "route": {"cluster": upstream, "timeout": "0s"}}
                        ],
                    }
                ]
            },
            "http_filters": [ROUTER],
        },
    }
    filters = [hcm]
    for patch in patches:
        assert patch["applyTo"] == "NETWORK_FILTER" and patch["match"]["context"] == "GATEWAY"
        assert patch["match"]["listener"]["filterChain"]["filter"]["name"] == HCM
        operation, value = patch["patch"]["operation"], patch["patch"]["value"]
        if operation == "MERGE":
            filters[-1] = _merge(filters[-1], value)
        else:
            assert operation == "INSERT_FIRST"
            filters.insert(0, value)
    return {
        "name": "gateway",
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
        "filter_chains": [{"filters": filters}],
    }


@asynccontextmanager
async def _gateway() -> AsyncIterator[str]:
    async def answer_late(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(QUIET_S)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer_late)
    runner = web.AppRunner(app)
    await runner.setup()
    upstream_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", upstream_port).start()
    raw = spec(gateway={"parentRef": {"name": "gw"}, "provider": "istio", "clientLimits": LIMITS})
    patches = by_name(render(raw), "EnvoyFilter", "p-client-limits")["spec"]["configPatches"]
    port = free_port()
    config = {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": free_port()}}},
        "static_resources": {
            "listeners": [_patched_listener(port, "up", patches)],
            "clusters": [
                {
                    "name": "up",
                    "type": "STATIC",
                    "connect_timeout": "1s",
                    "load_assignment": {
                        "cluster_name": "up",
                        "endpoints": [
                            {
                                "lb_endpoints": [
                                    {
                                        "endpoint": {
                                            "address": {
                                                "socket_address": {
                                                    "address": "127.0.0.1",
                                                    "port_value": upstream_port,
                                                }
                                            }
                                        }
                                    }
                                ]
                            }
                        ],
                    },
                }
            ],
        },
    }
    try:
        async with EnvoyProcess(config):
            yield f"127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _request(address: str, body: bytes, declared: int | None = None) -> bytes:
    length = len(body) if declared is None else declared
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\n"
        f"content-length: {length}\r\n\r\n"
    ).encode() + body


async def test_the_timeouts_bound_the_upload_and_never_the_response() -> None:
    async with _gateway() as address:
        reader, writer = await send_raw(address, _request(address, b'{"m": 1}'))
        started = time.monotonic()
        quiet = await read_status(reader, 10)
        waited = time.monotonic() - started
        writer.close()
        reader, writer = await send_raw(address, f"POST / HTTP/1.1\r\nhost: {address}\r\n".encode())
        headers = await read_status(reader, 10)
        writer.close()
        reader, writer = await send_raw(address, _request(address, b'{"mess', declared=100_000))
        body = await read_status(reader, 10)
        writer.close()
    assert quiet == 200 and waited >= QUIET_S  # quiet past requestTimeoutS, not cut
    assert headers == 408
    assert body == 408


async def test_connections_past_the_limit_are_closed() -> None:
    async with _gateway() as address:
        host, port = address.rsplit(":", 1)
        held = [await asyncio.open_connection(host, int(port)) for _ in range(LIMITS["maxConnections"])]
        await asyncio.sleep(0.3)
        reader, writer = await send_raw(address, _request(address, b"{}"))
        refused = await read_status(reader, 5)
        writer.close()
        _, first = held.pop(0)
        first.close()
        await asyncio.sleep(0.3)
        reader, writer = await send_raw(address, _request(address, b"{}"))
        freed = await read_status(reader, 10)
        writer.close()
        for _, w in held:
            w.close()
    assert refused == -1  # closed without an answer
    assert freed == 200  # a closed connection frees its place


async def _server_settings(address: str) -> dict[int, int]:
    """The gateway's first SETTINGS frame on an HTTP/2 (prior knowledge) connection."""
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(H2_PREFACE + bytes([0, 0, 0, SETTINGS, 0, 0, 0, 0, 0]))
    await writer.drain()
    try:
        while True:
            header = await asyncio.wait_for(reader.readexactly(9), 5)
            length = int.from_bytes(header[:3], "big")
            payload = await asyncio.wait_for(reader.readexactly(length), 5)
            if header[3] == SETTINGS and not header[4] & 0x1:  # not an ACK
                return {
                    int.from_bytes(payload[i : i + 2], "big"): int.from_bytes(payload[i + 2 : i + 6], "big")
                    for i in range(0, length, 6)
                }
    finally:
        writer.close()


async def test_http2_clients_are_told_the_stream_limit() -> None:
    async with _gateway() as address:
        settings = await _server_settings(address)
    assert settings.get(MAX_CONCURRENT_STREAMS) == LIMITS["maxConcurrentStreams"]
