"""Async per-endpoint scrape loops, one kept-alive HTTP/1.1 connection per endpoint
(:mod:`smetric.epp.scrape.http1`: a fraction of aiohttp's CPU per scrape, see there).

Each endpoint is scraped every ``interval_s`` (``--refresh-interval-ms``; the next scrape starts
``interval_s`` after the previous one *finished*, so a slow engine is never hit by overlapping
scrapes). A scrape that fails (connection refused, timeout, HTTP error, not vLLM text) leaves the
last good :class:`EngineMetrics` in place; it ages past ``--staleness-threshold-ms`` and the
datastore reports the endpoint stale. Failures are logged once per state change (up -> down and
down -> up), not per scrape. After its first good scrape and then every 30 s an endpoint is also
asked for ``/v1/models`` (:mod:`smetric.epp.scrape.models`: the served model names that bound the
model label of the picker's metrics).

Bounds: a scrape takes at most ``timeout_s`` (``--scrape-timeout-ms``) and reads at most
``max_page_bytes`` (``--scrape-max-bytes``; a larger page is refused without reading the rest), so
a hostile or broken engine cannot stall the event loop or grow the picker's memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from smetric.core.stopping import cancel_and_wait
from smetric.epp.contracts import EngineMetrics
from smetric.epp.scrape.http1 import BodyTooLarge, HttpError, KeepAliveGetter
from smetric.epp.scrape.models import ModelLister
from smetric.epp.scrape.parse import CacheConfig, LineMemo, MetricsParseError, parse_vllm_metrics

log = logging.getLogger(__name__)

Clock = Callable[[], float]

# A vLLM /metrics page is ~100-300 kB (histograms per model); 4 MiB is >10x that (stated assumption).
MAX_PAGE_BYTES = 4 * 1024 * 1024


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
        self._timeout_s = timeout_s
        self._path = path
        self._max_page_bytes = max_page_bytes
        self._clock = clock
        self._getters: dict[str, KeepAliveGetter] = {}
        self._memos: dict[str, LineMemo] = {}  # each endpoint's last page, line by line
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._metrics: dict[str, EngineMetrics] = {}
        self._cache: dict[str, CacheConfig] = {}
        self._down: dict[str, bool] = {}
        self._lister = ModelLister(timeout_s, clock)  # GET /v1/models: the served model names
        self.scrapes = 0
        self.failures = 0

    def metrics(self, address: str) -> EngineMetrics | None:
        return self._metrics.get(address)

    def cache_config(self, address: str) -> CacheConfig | None:
        return self._cache.get(address)

    def models(self, address: str) -> tuple[str, ...]:
        """The model ids ``address`` listed at ``/v1/models`` (bounded, :mod:`.models`)."""
        return self._lister.models(address)

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
                self._memos.pop(address, None)
                self._lister.forget(address)
                getter = self._getters.pop(address, None)
                if getter is not None:
                    getter.close()
        loop = asyncio.get_running_loop()
        for address in wanted - self._tasks.keys():
            self._tasks[address] = loop.create_task(self._loop(address), name=f"scrape:{address}")

    async def scrape_once(self, address: str) -> bool:
        """One scrape of ``address``; ``True`` if it produced fresh metrics."""
        url = f"http://{address}{self._path}"
        error = ""
        try:
            status, page = await self._getter(address).get(self._timeout_s)
            if status != 200:
                error = f"HTTP {status}"
            else:
                memo = self._memos.setdefault(address, {})
                parsed = parse_vllm_metrics(page, self._clock(), memo)
                self._metrics[address] = parsed.metrics
                self._cache[address] = parsed.cache
        except (BodyTooLarge, MetricsParseError) as exc:
            error = str(exc)
        except (HttpError, ValueError) as exc:  # ValueError: a malformed address
            error = f"{type(exc).__name__}: {exc}"
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

    def _getter(self, address: str) -> KeepAliveGetter:
        getter = self._getters.get(address)
        if getter is None:
            host, port = split_address(address)
            getter = KeepAliveGetter(host, port, self._path, self._max_page_bytes)
            self._getters[address] = getter
        return getter

    async def _loop(self, address: str) -> None:
        while True:
            if await self.scrape_once(address) and self._lister.due(address):
                await self._lister.refresh(address, *split_address(address))
            await asyncio.sleep(self._interval_s)

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        await cancel_and_wait(*tasks)
        for getter in self._getters.values():
            getter.close()
        self._getters.clear()
        self._lister.close()


def split_address(address: str) -> tuple[str, int]:
    """``ip:port`` or ``[v6]:port`` -> (host, port); :class:`ValueError` otherwise."""
    if address.startswith("["):
        host, sep, port = address[1:].partition("]:")
    else:
        host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"endpoint address {address!r} is not host:port")
    return host, int(port)
