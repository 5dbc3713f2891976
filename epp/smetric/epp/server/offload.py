"""Request-body parsing off the event loop for large bodies (issue 12).

Parsing a 15 MiB body takes tens of milliseconds of CPU; on the event loop it stalls every other
stream, the health server's answers and the metric scrapes (a probe saw health stall 1.5 s and
healthy endpoints go stale under three such bodies). Bodies at least
``ServicerSettings.offload_parse_bytes`` long are parsed on a small thread pool instead. orjson holds
the GIL while it decodes, so this bounds the loop's stall to one decode slice rather than removing
it; the pool is bounded (``parse_workers`` threads) and the queued bodies are bounded by the
global body budget (:class:`~smetric.epp.server.guard.BodyBudget`).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from smetric.epp.parse.body import ParsedBody, parse_body


class ParseOffload:
    def __init__(self, workers: int = 2) -> None:
        self._workers = max(1, workers)
        self._pool: ThreadPoolExecutor | None = None  # made on first use (most bodies never need it)
        self.parsed = 0

    async def parse(self, body: bytes | bytearray, path: str) -> ParsedBody:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="epp-parse")
        loop = asyncio.get_running_loop()
        self.parsed += 1
        return await loop.run_in_executor(self._pool, parse_body, body, path)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
