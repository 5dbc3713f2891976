"""Async per-endpoint scrape loops over one keep-alive ``aiohttp`` session.

Each endpoint is scraped every ``interval_s`` (``--refresh-interval-ms``; the next scrape starts
``interval_s`` after the previous one *finished*, so a slow engine is never hit by overlapping
scrapes). A scrape that fails (connection refused, timeout, HTTP error, not vLLM text) leaves the
last good :class:`EngineMetrics` in place; it ages past ``--staleness-threshold-ms`` and the
datastore reports the endpoint stale. Failures are logged once per state change (up -> down and
down -> up), not per scrape.

Bounds (issue 12): a scrape takes at most ``timeout_s`` (``--scrape-timeout-ms``) and reads at most
``max_page_bytes`` (``--scrape-max-bytes``; a larger page is refused without reading the rest), so
a hostile or broken engine cannot stall the event loop or grow the picker's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

import aiohttp

from smetric.epp.contracts import EngineMetrics
from smetric.epp.scrape.parse import CacheConfig, MetricsParseError, parse_vllm_metrics

log = logging.getLogger(__name__)

Clock = Callable[[], float]

# A vLLM /metrics page is ~100-300 kB (histograms per model); 4 MiB is >10x that (stated assumption).
MAX_PAGE_BYTES = 4 * 1024 * 1024


class PageTooLarge(Exception):
    pass


async def read_bounded(resp: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    """The body, or :class:`PageTooLarge` as soon as it passes ``max_bytes``."""
    if resp.content_length is not None and resp.content_length > max_bytes:
        raise PageTooLarge(f"page of {resp.content_length} bytes > {max_bytes}")
    buf = bytearray()
    async for chunk in resp.content.iter_chunked(64 * 1024):
        buf += chunk
        if len(buf) > max_bytes:
            raise PageTooLarge(f"page over {max_bytes} bytes")
    return bytes(buf)


class ScrapeManager:
    def __init__(
        self,
        interval_s: float = 0.05,
        timeout_s: float = 1.0,
        path: str = "/metrics",
        clock: Clock = time.monotonic,
        max_page_bytes: int = MAX_PAGE_BYTES,
    ) -> None:
        if interval_s <= 0 or timeout_s <= 0:
            raise ValueError("interval_s and timeout_s must be positive")
        self._interval_s = interval_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._path = path
        self._max_page_bytes = max_page_bytes
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._metrics: dict[str, EngineMetrics] = {}
        self._cache: dict[str, CacheConfig] = {}
        self._down: dict[str, bool] = {}
        self.scrapes = 0
        self.failures = 0

    def metrics(self, address: str) -> EngineMetrics | None:
        return self._metrics.get(address)

    def cache_config(self, address: str) -> CacheConfig | None:
        return self._cache.get(address)

    def is_down(self, address: str) -> bool:
        """The last scrape of ``address`` failed (or none has succeeded yet)."""
        return self._down.get(address, True)

    def sync(self, addresses: Iterable[str]) -> None:
        """Start loops for new addresses, stop and forget removed ones (call from the event loop)."""
        wanted = set(addresses)
        for address in list(self._tasks):
            if address not in wanted:
                self._tasks.pop(address).cancel()
                self._metrics.pop(address, None)
                self._cache.pop(address, None)
                self._down.pop(address, None)
        if self._session is None and wanted:
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30.0)
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        loop = asyncio.get_running_loop()
        for address in wanted - self._tasks.keys():
            self._tasks[address] = loop.create_task(self._loop(address), name=f"scrape:{address}")

    async def scrape_once(self, address: str) -> bool:
        """One scrape of ``address``; ``True`` if it produced fresh metrics."""
        assert self._session is not None, "sync() first"
        url = f"http://{address}{self._path}"
        error = ""
        try:
            async with self._session.get(url) as resp:
                if resp.status != 200:
                    error = f"HTTP {resp.status}"
                else:
                    text = (await read_bounded(resp, self._max_page_bytes)).decode("utf-8")
                    parsed = parse_vllm_metrics(text, self._clock())
                    self._metrics[address] = parsed.metrics
                    self._cache[address] = parsed.cache
        except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        except (MetricsParseError, PageTooLarge) as exc:
            error = str(exc)
        except Exception as exc:  # never let one endpoint's surprise end its scrape loop
            log.exception("unexpected error scraping %s", url)
            error = f"unexpected {type(exc).__name__}"
        self.scrapes += 1
        was_down = self._down.get(address)
        if error:
            self.failures += 1
            if was_down is not True:
                log.warning("scrape %s failed (%s); endpoint goes stale", url, error)
            self._down[address] = True
            return False
        if was_down is True:
            log.info("scrape %s recovered", url)
        self._down[address] = False
        return True

    async def _loop(self, address: str) -> None:
        while True:
            await self.scrape_once(address)
            await asyncio.sleep(self._interval_s)

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._session is not None:
            await self._session.close()
            self._session = None
