"""Requests Envoy's HTTP codec refuses get a status through real Envoy with the picker's ext_proc
filter in the chain (where Envoy's own local reply never reaches the client: envoyproxy/envoy#29440):
HTTP/1.0 426, 100 KiB of headers or 101 header fields 431; a request with 50 KiB of headers in 25
fields is still routed (200)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from tests.support.envoy_stack import one_backend_stack, session_body

pytestmark = [pytest.mark.integration]


async def _exchange(address: str, head: bytes, body: bytes = b"") -> bytes:
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(head + body)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(200), 10.0)
    finally:
        writer.close()


def _post(version: str, extra: bytes, body: bytes) -> bytes:
    return (
        f"POST /v1/chat/completions {version}\r\nhost: gw\r\ncontent-type: application/json\r\n".encode()
        + extra
        + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
    )


async def test_refused_requests_get_a_status() -> None:
    body = orjson.dumps(session_body("proto", 0))
    async with one_backend_stack() as (address, _):
        http10 = await _exchange(address, _post("HTTP/1.0", b"", body), body)
        big = await _exchange(
            address, _post("HTTP/1.1", b"x-big: " + b"a" * (100 * 1024) + b"\r\n", body), body
        )
        many = b"".join(b"x-h%d: v\r\n" % i for i in range(101))
        numerous = await _exchange(address, _post("HTTP/1.1", many, body), body)
        wide = b"".join(b"x-ok%d: %s\r\n" % (i, b"a" * 2048) for i in range(25))  # 50 KiB, 25 fields
        fine = await _exchange(address, _post("HTTP/1.1", wide, body), body)
    assert http10.startswith(b"HTTP/1.0 426"), http10
    assert big.startswith(b"HTTP/1.1 431"), big
    assert numerous.startswith(b"HTTP/1.1 431"), numerous
    assert fine.startswith(b"HTTP/1.1 200"), fine
