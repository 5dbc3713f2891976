"""Raw HTTP/1.1 over a socket, for tests of what a gateway does with requests no HTTP client sends
(unfinished headers, bodies shorter than declared, connections held open)."""

from __future__ import annotations

import asyncio


async def send_raw(address: str, data: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Open a connection to ``host:port``, write ``data`` and keep the connection open."""
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(data)
    await writer.drain()
    return reader, writer


async def read_status(reader: asyncio.StreamReader, timeout_s: float) -> int:
    """The answer's status; 0 when none came in ``timeout_s``, -1 when the connection closed."""
    try:
        line = await asyncio.wait_for(reader.readline(), timeout_s)
    except TimeoutError:
        return 0
    except ConnectionError:
        return -1
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 else -1
