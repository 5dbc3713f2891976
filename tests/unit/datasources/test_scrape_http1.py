"""The scrapers' keep-alive HTTP/1.1 GET client against raw asyncio servers (exact bytes on the wire)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from smetric.epp.scrape.http1 import BodyTooLarge, HttpError, KeepAliveGetter
from smetric.epp.scrape.scraper import split_address

Reply = Callable[[int], bytes | None]  # request number on this connection -> bytes (None: say nothing)


@asynccontextmanager
async def server(reply: Reply, close_after: bool = False) -> AsyncIterator[tuple[int, list[int]]]:
    """A server answering each request on a connection with ``reply(n)``; yields (port, connections)."""
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        n = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(b"GET /metrics HTTP/1.1\r\n")
                data = reply(n)
                n += 1
                if data is None:
                    await asyncio.sleep(10)
                    return
                writer.write(data)
                await writer.drain()
                if close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield port, connections
    finally:
        srv.close()


def fixed(body: bytes, extra: bytes = b"") -> Reply:
    return lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n" % (len(body), extra) + body


async def test_content_length_and_one_connection_kept_alive() -> None:
    async with server(fixed(b"vllm:num_requests_running 3\n")) as (port, conns):
        g = KeepAliveGetter("127.0.0.1", port, "/metrics", 1 << 20)
        for _ in range(5):
            assert await g.get(1.0) == (200, b"vllm:num_requests_running 3\n")
        assert len(conns) == 1
        g.close()


async def test_chunked_body_with_extension_and_trailer() -> None:
    body = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n"
    async with server(lambda n: body) as (port, conns):
        g = KeepAliveGetter("127.0.0.1", port, "/metrics", 1 << 20)
        assert await g.get(1.0) == (200, b"hello world")
        assert await g.get(1.0) == (200, b"hello world")
        assert len(conns) == 1
        g.close()


async def test_body_delimited_by_close_and_connection_close_reconnects() -> None:
    async with server(lambda n: b"HTTP/1.1 200 OK\r\n\r\nup 1\n", close_after=True) as (port, conns):
        g = KeepAliveGetter("127.0.0.1", port, "/metrics", 1 << 20)
        assert await g.get(1.0) == (200, b"up 1\n")
        assert await g.get(1.0) == (200, b"up 1\n")
        assert len(conns) == 2
    async with server(fixed(b"x", b"Connection: close\r\n"), close_after=True) as (port, conns):
        g = KeepAliveGetter("127.0.0.1", port, "/metrics", 1 << 20)
        assert await g.get(1.0) == (200, b"x")
        assert await g.get(1.0) == (200, b"x")
        assert len(conns) == 2


async def test_status_other_than_200_is_returned() -> None:
    async with server(lambda n: b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n") as (port, _):
        g = KeepAliveGetter("127.0.0.1", port, "/metrics", 1 << 20)
        assert await g.get(1.0) == (503, b"")
        g.close()


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n",  # announced too large: refused at once
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" + b"x" * 2048 + b"\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 2048,  # until close, over the limit
    ],
)
async def test_body_over_the_limit_is_refused(reply: bytes) -> None:
    async with server(lambda n: reply) as (port, _):
        g = KeepAliveGetter("127.0.0.1", port, "/metrics", 1024)
        with pytest.raises(BodyTooLarge):
            await g.get(1.0)


@pytest.mark.parametrize(
    "reply",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * 70_000,  # headers without end
    ],
)
async def test_protocol_garbage_is_an_error_not_a_hang(reply: bytes) -> None:
    async with server(lambda n: reply) as (port, _):
        g = KeepAliveGetter("127.0.0.1", port, "/metrics", 1 << 20)
        with pytest.raises(HttpError):
            await g.get(2.0)


async def test_silent_server_times_out_and_the_next_get_reconnects() -> None:
    async with server(lambda n: None) as (port, conns):
        g = KeepAliveGetter("127.0.0.1", port, "/metrics", 1 << 20)
        with pytest.raises(HttpError, match=r"within 0\.1 s"):
            await g.get(0.1)
        with pytest.raises(HttpError):
            await g.get(0.1)
        assert len(conns) == 2
        g.close()


async def test_refused_connection_and_truncated_body() -> None:
    g = KeepAliveGetter("127.0.0.1", 1, "/metrics", 1 << 20)
    with pytest.raises(HttpError):
        await g.get(1.0)
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly a part"
    async with server(lambda n: cut, close_after=True) as (port, _):
        g = KeepAliveGetter("127.0.0.1", port, "/metrics", 1 << 20)
        with pytest.raises(HttpError, match="closed"):
            await g.get(1.0)


def test_split_address() -> None:
    assert split_address("10.0.0.1:8000") == ("10.0.0.1", 8000)
    assert split_address("[fd00::1]:8000") == ("fd00::1", 8000)
    for bad in ("10.0.0.1", "host:http", ":80", "[::1]", "h:70000"):
        with pytest.raises(ValueError):
            split_address(bad)


def test_on_uvloop_the_pickers_default_loop() -> None:
    """The same exchange on uvloop (its transports are not ``asyncio.Transport`` subclasses)."""
    uvloop = pytest.importorskip("uvloop")

    async def exchange() -> tuple[tuple[int, bytes], int]:
        async with server(fixed(b"up 1\n")) as (port, conns):
            g = KeepAliveGetter("127.0.0.1", port, "/metrics", 1 << 20)
            await g.get(1.0)
            result = await g.get(1.0)
            g.close()
            return result, len(conns)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(exchange()) == ((200, b"up 1\n"), 1)
