"""A minimal keep-alive HTTP/1.1 GET client for the metric scrapes (plain HTTP only).

Why not aiohttp: a scrape of an idle engine through ``aiohttp.ClientSession.get`` costs ~0.5 ms of
event-loop CPU here, and the picker scrapes every endpoint every 50 ms (the upstream default): at
8 endpoints that was 9 % of a core with no request in flight, stolen from the routing path, and at
128 endpoints it would need more than one core. One :class:`asyncio.Protocol` per endpoint, one
request at a time on one kept-alive connection, does the same GET for a fraction of that
(``smetric.bench.latency.picker`` measures the picker's idle CPU share).

Scope, on purpose: ``GET`` of one path, ``Content-Length`` or ``chunked`` bodies, no redirects, no
compression (none is asked for), no TLS (``https`` endpoints keep the aiohttp path). Bounds: the
whole exchange within ``timeout_s``, headers within 64 KiB, the body within ``max_bytes`` (refused
as soon as it is known to be larger). Anything unexpected closes the connection; the next scrape
opens a new one.
"""

from __future__ import annotations

import asyncio
from typing import cast

MAX_HEADER_BYTES = 64 * 1024


class HttpError(Exception):
    """The exchange failed: connection, timeout, protocol or size (the message says which)."""


class BodyTooLarge(HttpError):
    pass


class _Exchange(asyncio.Protocol):
    """One kept-alive connection; :meth:`request` sends a GET and waits for its whole response."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.alive = True
        self.keep_alive = True

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCP transport is not an asyncio.Transport subclass: no isinstance check here.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        waiter = self.waiter
        if waiter is None or waiter.done():
            if waiter is None:  # bytes nobody asked for: the connection is out of step
                self.close()
            return
        try:
            done = self._parse()
        except HttpError as exc:
            waiter.set_exception(exc)
            self.close()
            return
        if done is not None:
            waiter.set_result(done)

    def connection_lost(self, exc: Exception | None) -> None:
        self.alive = False
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        try:  # a body delimited by the close is complete now
            done = self._parse() if exc is None else None
        except HttpError as err:
            waiter.set_exception(err)
            return
        if done is not None:
            waiter.set_result(done)
        else:
            waiter.set_exception(HttpError(f"connection closed ({exc or 'by the server'})"))

    # -- client side ----------------------------------------------------------------------------
    def close(self) -> None:
        self.alive = False
        if self.transport is not None:
            self.transport.close()

    def send(self, request: bytes, loop: asyncio.AbstractEventLoop) -> asyncio.Future[tuple[int, bytes]]:
        assert self.transport is not None
        self.buf.clear()
        self.waiter = loop.create_future()
        self.transport.write(request)
        return self.waiter

    def _parse(self) -> tuple[int, bytes] | None:
        """(status, body) once the response is complete, ``None`` while more bytes are needed."""
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEADER_BYTES:
                raise HttpError(f"response headers over {MAX_HEADER_BYTES} bytes")
            return None
        head = bytes(buf[:end]).decode("latin-1").split("\r\n")
        parts = head[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise HttpError(f"not an HTTP/1.x status line: {head[0][:80]!r}")
        status = int(parts[1])
        length: int | None = None
        chunked = False
        keep_alive = parts[0] != "HTTP/1.0"
        for line in head[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            value = value.strip()
            if name == "content-length":
                if not value.isdigit():
                    raise HttpError(f"bad content-length {value[:40]!r}")
                length = int(value)
            elif name == "transfer-encoding":
                chunked = "chunked" in value.lower()
            elif name == "connection":
                keep_alive = value.lower() != "close"
        self.keep_alive = keep_alive
        start = end + 4
        if chunked:
            return self._chunked(status, start)
        if length is None:  # body until close: not kept alive, bounded by max_bytes
            self.keep_alive = False
            if len(buf) - start > self.max_bytes:
                raise BodyTooLarge(f"page over {self.max_bytes} bytes")
            return None if self.alive else (status, bytes(buf[start:]))
        if length > self.max_bytes:
            raise BodyTooLarge(f"page of {length} bytes > {self.max_bytes}")
        if len(buf) - start < length:
            return None
        return status, bytes(buf[start : start + length])

    def _chunked(self, status: int, pos: int) -> tuple[int, bytes] | None:
        buf = self.buf
        body = bytearray()
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return None
            size_text = bytes(buf[pos:eol]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise HttpError(f"bad chunk size {size_text[:20]!r}") from None
            if size == 0:
                if buf.find(b"\r\n\r\n", eol) < 0:  # the last-chunk line, trailers, empty line
                    return None
                return status, bytes(body)
            if len(body) + size > self.max_bytes:
                raise BodyTooLarge(f"page over {self.max_bytes} bytes")
            if len(buf) < eol + 2 + size + 2:
                return None
            body += buf[eol + 2 : eol + 2 + size]
            pos = eol + 2 + size + 2


class KeepAliveGetter:
    """``await getter.get(timeout_s)`` -> (status, body) of ``GET path`` on ``host:port``."""

    def __init__(self, host: str, port: int, path: str, max_bytes: int) -> None:
        self.host, self.port = host, port
        self.max_bytes = max_bytes
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._request = (
            f"GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: text/plain\r\n"
            "User-Agent: smetric-epp\r\n\r\n"
        ).encode("latin-1")
        self._conn: _Exchange | None = None

    async def get(self, timeout_s: float) -> tuple[int, bytes]:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s):
                conn = self._conn
                if conn is None or not conn.alive:
                    _, conn = await loop.create_connection(
                        lambda: _Exchange(self.max_bytes), self.host, self.port
                    )
                    self._conn = conn
                result = await conn.send(self._request, loop)
        except TimeoutError:
            self.close()
            raise HttpError(f"no complete response within {timeout_s:g} s") from None
        except OSError as exc:
            self.close()
            raise HttpError(f"{type(exc).__name__}: {exc}") from None
        except HttpError:
            self.close()
            raise
        if not conn.keep_alive:
            self.close()
        else:
            conn.waiter = None
        return result

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
