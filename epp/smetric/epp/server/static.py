"""A fixed endpoint list with metrics set by the caller: for tests, the bench and demos.

Production uses the data-source engineer's ``Datastore`` (discovery + scraping + KV events); this
implements the same :class:`~smetric.epp.contracts.EndpointSource` protocol without I/O.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from smetric.epp.contracts import EndpointInfo, EngineMetrics


def idle_metrics(now_s: float | None = None, kv_capacity_tokens: int = 0) -> EngineMetrics:
    return EngineMetrics(
        running=0,
        waiting=0,
        kv_usage=0.0,
        kv_capacity_tokens=kv_capacity_tokens,
        block_size=16,
        prefix_cache_queries=0.0,
        prefix_cache_hits=0.0,
        scraped_at_s=time.monotonic() if now_s is None else now_s,
    )


class StaticEndpointSource:
    def __init__(self, endpoints: Iterable[EndpointInfo | str], fresh: bool = True) -> None:
        self._endpoints: list[EndpointInfo] = [
            e if isinstance(e, EndpointInfo) else EndpointInfo(e) for e in endpoints
        ]
        self._metrics: dict[str, EngineMetrics] = {}
        if fresh:
            for ep in self._endpoints:
                self._metrics[ep.address] = idle_metrics()

    def ready_endpoints(self) -> Sequence[EndpointInfo]:
        return self._endpoints

    def metrics(self, address: str) -> EngineMetrics | None:
        return self._metrics.get(address)

    def set_metrics(self, address: str, metrics: EngineMetrics | None) -> None:
        if metrics is None:
            self._metrics.pop(address, None)
        else:
            self._metrics[address] = metrics

    def set_endpoints(self, endpoints: Iterable[EndpointInfo | str]) -> None:
        self._endpoints = [e if isinstance(e, EndpointInfo) else EndpointInfo(e) for e in endpoints]
