"""The picker's view of the pool: discovery + scraping (+ KV events), behind ``EndpointSource``.

Staleness (documented fallback): an endpoint is stale when it has never been scraped, its last
scrape failed (connection refused, timeout, HTTP error, not vLLM text), or its last good metrics are
older than ``--staleness-threshold-ms``. Policies treat a stale endpoint as saturated and pick it only
when no fresh one exists (``EndpointSnapshot.stale``). Endpoints leave the set only when discovery
drops them (standalone lists never do).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from smetric.core.tokenizer import load_tokenizer
from smetric.epp.contracts import EndpointInfo, EngineMetrics, PoolIndex
from smetric.epp.discovery.base import Discovery
from smetric.epp.index.approximate import ApproximateIndex
from smetric.epp.kvevents.store import BlockStore
from smetric.epp.kvevents.subscriber import GapCallback, KvEventManager
from smetric.epp.scrape.scraper import ScrapeManager
from smetric.epp.server.keyrecipe import KeyRecipe
from smetric.epp.settings import PickerSettings

log = logging.getLogger(__name__)


class Datastore:
    def __init__(
        self,
        discovery: Discovery,
        scraper: ScrapeManager,
        index: PoolIndex,
        kv_events: KvEventManager | None = None,
        staleness_threshold_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        max_requests_per_scrape: int = 0,
    ) -> None:
        """``max_requests_per_scrape``: an endpoint sent this many requests since its last
        successful scrape is stale until a newer scrape answers (0: no such bound)."""
        self._discovery = discovery
        self._scraper = scraper
        self._index = index
        self._kv_events = kv_events
        self._staleness_s = staleness_threshold_s
        self._clock = clock
        self._endpoints: tuple[EndpointInfo, ...] = ()
        self._warned_block_size: set[str] = set()
        self._removal_listeners: list[Callable[[str], None]] = []
        self._max_per_scrape = max_requests_per_scrape
        # address -> (scraped_at_s of the scrape the count runs since, requests sent since it)
        self._unconfirmed: dict[str, tuple[float, int]] = {}

    def on_removed(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(address)`` when discovery drops an endpoint (e.g. the picker's
        ``PrefillRateEstimator.forget``: a pod that comes back at that address starts afresh)."""
        self._removal_listeners.append(listener)

    @property
    def index(self) -> PoolIndex:
        return self._index

    @property
    def scraper(self) -> ScrapeManager:
        return self._scraper

    async def start(self) -> None:
        await self._discovery.start(self._on_endpoints)

    async def stop(self) -> None:
        await self._discovery.stop()
        await self._scraper.stop()
        if self._kv_events is not None:
            await self._kv_events.stop()

    def _on_endpoints(self, endpoints: Sequence[EndpointInfo]) -> None:
        old = {e.address for e in self._endpoints}
        self._endpoints = tuple(endpoints)
        new = {e.address for e in self._endpoints}
        self._scraper.sync(new)
        if self._kv_events is not None:
            self._kv_events.sync(self._endpoints)
        for address in old - new:
            self._index.forget(address)
            self._unconfirmed.pop(address, None)
        if self._index.reads_kv_events:
            for e in self._endpoints:
                if not e.kv_events_endpoint and e.address not in old:
                    log.warning("%s has no KV-event publisher: its precise prefix hits stay 0", e.address)
        for address in old - new:
            for listener in self._removal_listeners:
                listener(address)

    # -- EndpointSource ----------------------------------------------------------------------

    def ready_endpoints(self) -> Sequence[EndpointInfo]:
        return self._endpoints

    def synced(self) -> bool:
        """Discovery has completed its first listing (the picker's readiness)."""
        return self._discovery.synced

    def metrics(self, address: str) -> EngineMetrics | None:
        m = self._scraper.metrics(address)
        if m is not None and self._index.engine_block_size is not None:
            self._check_block_size(address, m.block_size, self._index.engine_block_size)
        return m

    def is_stale(self, address: str) -> bool:
        m = self._scraper.metrics(address)
        if m is None or self._scraper.is_down(address):
            return True
        if self._max_per_scrape:
            since, n = self._unconfirmed.get(address, (-1.0, 0))
            if since == m.scraped_at_s and n >= self._max_per_scrape:
                return True  # an engine frozen since its last scrape gets at most this many
        return self._clock() - m.scraped_at_s > self._staleness_s

    def dispatched(self, address: str) -> None:
        """A request was sent to ``address`` (the picker's dispatch hook): counted until the
        endpoint's next successful scrape confirms it is alive."""
        if not self._max_per_scrape:
            return
        m = self._scraper.metrics(address)
        at = m.scraped_at_s if m is not None else -1.0
        since, n = self._unconfirmed.get(address, (at, 0))
        self._unconfirmed[address] = (at, n + 1 if since == at else 1)

    def serves(self, model: str) -> bool:
        """One of the pool's endpoints lists ``model`` at ``/v1/models`` (the scraper's bounded lists)."""
        return any(model in self._scraper.models(e.address) for e in self._endpoints)

    def capacity_blocks(self, address: str) -> int | None:
        """The engine's ``num_gpu_blocks`` (sizes the approximate index's LRU), if scraped."""
        cache = self._scraper.cache_config(address)
        return (cache.num_gpu_blocks or None) if cache is not None else None

    def _check_block_size(self, address: str, block_size: int, expected: int) -> None:
        if block_size and block_size != expected and address not in self._warned_block_size:
            self._warned_block_size.add(address)
            log.warning(
                "%s reports block_size=%d but --block-size=%d: precise hits will read 0",
                address,
                block_size,
                expected,
            )


def build_datastore(settings: PickerSettings, on_kv_gap: GapCallback | None = None) -> Datastore:
    """Wire the data sources from the picker's settings (:mod:`smetric.epp.settings`)."""
    from smetric.epp.discovery.standalone import StaticDiscovery

    s = settings
    discovery: Discovery
    if s.endpoints:
        discovery = StaticDiscovery.from_spec(s.endpoints, s.kv_events_port)
    elif s.pool_name:
        from smetric.epp.discovery.kubernetes import KubeDiscovery  # the Kubernetes client: ~2 s of imports

        discovery = KubeDiscovery(s.pool_name, s.pool_namespace, s.kv_events_port)
    else:
        raise ValueError("either --endpoints (standalone) or --pool-name (Kubernetes) is required")
    scraper = ScrapeManager(
        interval_s=s.refresh_interval_s, timeout_s=s.scrape_timeout_s, max_page_bytes=s.scrape_max_bytes
    )
    kv_events: KvEventManager | None = None
    store: BlockStore | None = None
    index: PoolIndex
    approximate: ApproximateIndex | None = None
    if s.prefix_index == "precise":
        store = BlockStore()
        index = KeyRecipe.of(s).precise_index(load_tokenizer(s.tokenizer), store)
        kv_events = KvEventManager(store, on_kv_gap, s.kv_events_max_message_bytes)
    elif s.prefix_index == "approximate":
        index = approximate = ApproximateIndex(block_tokens=s.block_size)
    else:
        raise ValueError(f"--prefix-index must be precise or approximate, got {s.prefix_index!r}")
    ds = Datastore(
        discovery, scraper, index, kv_events, s.staleness_s, max_requests_per_scrape=s.max_requests_per_scrape
    )
    if approximate is not None:
        approximate.set_capacity_source(ds.capacity_blocks)
    if store is not None:  # the KV block store's cap follows each engine's num_gpu_blocks
        store.set_capacity_source(ds.capacity_blocks)
    return ds
