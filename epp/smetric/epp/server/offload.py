"""Request-body parsing off the event loop for large bodies.

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
import dataclasses
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from smetric.epp.contracts import PromptKey
from smetric.epp.parse.body import ParsedBody, parse_body

Keyer = Callable[[ParsedBody], tuple[str, PromptKey]]


def _parse_and_key(body: bytes | bytearray, path: str, keyer: Keyer) -> tuple[ParsedBody, str, PromptKey]:
    parsed = parse_body(body, path)
    text, key = keyer(parsed)
    # The messages (the whole parsed JSON document of an agent body) served the key only: drop them
    # here so a request waiting for its decision holds its texts and key, not the document.
    return dataclasses.replace(parsed, messages=()), text, key


class ParseOffload:
    def __init__(self, workers: int = 2) -> None:
        self._workers = max(1, workers)
        self._pool: ThreadPoolExecutor | None = None  # made on first use (most bodies never need it)
        self.parsed = 0

    async def parse(
        self, body: bytes | bytearray, path: str, keyer: Keyer
    ) -> tuple[ParsedBody, str, PromptKey]:
        """Parse, then ``keyer(parsed)`` -> (the prompt text the index sees, its index key): the
        key of a long prompt (hashing, tokenizing) is the other big cost of a large body."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="epp-parse")
        loop = asyncio.get_running_loop()
        self.parsed += 1
        return await loop.run_in_executor(self._pool, _parse_and_key, body, path, keyer)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
