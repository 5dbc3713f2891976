"""Scrape every instance's ``/metrics``: one-off snapshots and a periodic running-requests sampler."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from smetric.bench.promtext import EngineScrape, MetricsFormatError, parse_engine_metrics
from smetric.core.stopping import cancel_and_wait


@dataclass(frozen=True, slots=True)
class LoadSample:
    t_s: float  # wall seconds since the sampler started
    running: tuple[float, ...]  # per instance, NaN where the scrape failed


async def scrape_one(session: aiohttp.ClientSession, base_url: str) -> EngineScrape | None:
    try:
        async with session.get(base_url.rstrip("/") + "/metrics") as resp:
            if resp.status != 200:
                return None
            return parse_engine_metrics(await resp.text())
    except (aiohttp.ClientError, TimeoutError, MetricsFormatError):
        return None


async def scrape_all(session: aiohttp.ClientSession, base_urls: Sequence[str]) -> dict[str, EngineScrape]:
    results = await asyncio.gather(*(scrape_one(session, u) for u in base_urls))
    return {u: r for u, r in zip(base_urls, results, strict=True) if r is not None}


class LoadSampler:
    """Samples ``vllm:num_requests_running`` of each instance every ``interval_s`` while running."""

    def __init__(self, base_urls: Sequence[str], interval_s: float = 0.5) -> None:
        self.base_urls = tuple(base_urls)
        self.interval_s = interval_s
        self.samples: list[LoadSample] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoadSampler:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        timeout = aiohttp.ClientTimeout(total=max(1.0, 2 * self.interval_s))
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                started = loop.time()
                scrapes = await asyncio.gather(*(scrape_one(session, u) for u in self.base_urls))
                running = tuple(float("nan") if s is None else s.running for s in scrapes)
                self.samples.append(LoadSample(started - t0, running))
                await asyncio.sleep(max(0.0, self.interval_s - (loop.time() - started)))
