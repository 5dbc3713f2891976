"""Through real Envoy: the picker learns each request's client connection from Envoy's
``connection.id`` ext_proc attribute (``request_attributes`` in the bundled bootstrap), not from
anything the client sends (the per-connection share of the body budget is keyed on it). Envoy's
``source.address`` would not do: with the listener's defaults Envoy takes it from the client's
``x-forwarded-for`` (this test's first version saw ``6.6.6.6:0``)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from tests.support.envoy_stack import one_backend_stack, session_body

pytestmark = [pytest.mark.integration]


async def test_the_picker_sees_the_client_connection_envoy_reports() -> None:
    body = orjson.dumps(session_body("fair", 0))
    async with one_backend_stack() as (address, servicer):
        seen: list[str] = []
        take = servicer.budget.take

        def spy(n: int, held: int = 0, client: str = "") -> bool:
            seen.append(client)
            return take(n, held, client)

        servicer.budget.take = spy  # type: ignore[method-assign]
        host, port = address.rsplit(":", 1)
        statuses = []
        for _ in range(2):  # two connections, two requests each: one id per connection
            reader, writer = await asyncio.open_connection(host, int(port))
            for last in (False, True):
                head = (
                    "POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
                    f"x-forwarded-for: 6.6.6.6\r\ncontent-length: {len(body)}\r\n"
                    + ("connection: close\r\n" if last else "")
                    + "\r\n"
                ).encode()
                writer.write(head + body)
                await writer.drain()
                statuses.append((await asyncio.wait_for(reader.readline(), 10.0)).split()[1])
                await asyncio.wait_for(_skip_response(reader), 10.0)
            writer.close()
        assert statuses == [b"200"] * 4
        ids = [c for c in seen if c]
        assert len(ids) == len(seen) and all(c.startswith("conn:") for c in ids), seen
        assert len(set(ids)) == 2, seen  # one per connection, whatever the client's headers


async def _skip_response(reader: asyncio.StreamReader) -> None:
    """Read the rest of one HTTP/1.1 response (headers, then a chunked or sized body)."""
    length, chunked = 0, False
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
        if name.strip().lower() == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    if not chunked:
        await reader.readexactly(length)
        return
    while True:
        size = int((await reader.readline()).split(b";")[0], 16)
        await reader.readexactly(size + 2)
        if size == 0:
            return
