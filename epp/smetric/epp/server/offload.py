"""Request-body parsing off the event loop for large bodies.

Parsing and keying a 15 MiB agent body (hundreds of thousands of messages: decode, render,
tokenize, hash) takes a second of CPU or more. On the event loop it stalls every other stream, the
health server's answers and the metric scrapes. Bodies at least
``ServicerSettings.offload_parse_bytes`` long are therefore parsed elsewhere:

* **worker processes** (``--parse-processes N``, the default where the picker runs from its
  flags; :mod:`~smetric.epp.server.parseworker`): the body is piped to one of ``N`` worker
  processes, which parse it, key it with the picker's index
  (:class:`~smetric.epp.server.keyrecipe.KeyRecipe`) and send back the parse's facts and the key's
  numbers (:func:`~smetric.epp.server.keyrecipe.slim`: no texts, no messages). The event loop only
  copies bytes. The parse's memory peak lives in the worker, which hands its freed heap back to the
  system after each body (``malloc_trim``);
* **threads** (``--parse-processes 0``, or no recipe): a bounded thread pool in the picker process.
  orjson, the chat rendering and the tokenizer hold the GIL, so this shortens the loop's stalls but
  does not remove them (health answers stalled 0.7-1.7 s under three 15.5 MiB agent bodies on a
  2-core box; ``smetric chaos`` row "3 concurrent 15.5 MiB agent bodies").

Either pool is bounded (``workers``), and the bodies queued for it are bounded by the global body
budget (:class:`~smetric.epp.server.guard.BodyBudget`). A worker process that dies (killed for
memory) fails the body it held with 503 and is replaced for the next body.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from smetric.epp.contracts import PromptKey
from smetric.epp.parse.body import ParsedBody, parse_body
from smetric.epp.server.keyrecipe import KeyRecipe
from smetric.epp.server.parseworker import WorkerPool

Keyer = Callable[[ParsedBody], tuple[str, PromptKey]]


def _parse_and_key(body: bytes | bytearray, path: str, keyer: Keyer) -> tuple[ParsedBody, str, PromptKey]:
    parsed = parse_body(body, path)
    text, key = keyer(parsed)
    # The messages (the whole parsed JSON document of an agent body) served the key only: drop them
    # here so a request waiting for its decision holds its texts and key, not the document.
    return dataclasses.replace(parsed, messages=()), text, key


class ParseOffload:
    """``recipe`` given and ``processes`` > 0: worker processes; otherwise ``workers`` threads
    keyed with the keyer the caller passes."""

    def __init__(self, workers: int = 2, recipe: KeyRecipe | None = None, processes: int = 0) -> None:
        self._workers = max(1, workers)
        self._threads: ThreadPoolExecutor | None = None  # made on first use (most bodies never need it)
        self._processes = WorkerPool(recipe, processes) if recipe is not None and processes > 0 else None
        self.parsed = 0

    @property
    def in_processes(self) -> bool:
        return self._processes is not None

    @property
    def worker_pids(self) -> list[int]:
        return self._processes.pids if self._processes is not None else []

    async def parse(
        self, body: bytes | bytearray, path: str, keyer: Keyer
    ) -> tuple[ParsedBody, str, PromptKey]:
        """Parse, then key -> (parsed body, the prompt text the index sees, its index key): the key
        of a long prompt (rendering, tokenizing, hashing) is the other big cost of a large body. In
        worker processes the text is not returned (``""``): only the key's numbers are needed.
        Raises :class:`~smetric.epp.parse.errors.RequestError` (400 for the body, 503 when a
        worker died)."""
        self.parsed += 1
        if self._processes is not None:
            parsed, key = await self._processes.parse(body, path)
            return parsed, "", key
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self._workers, thread_name_prefix="epp-parse")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, _parse_and_key, body, path, keyer)

    async def close(self) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._threads = None
        if self._processes is not None:
            await self._processes.close()
