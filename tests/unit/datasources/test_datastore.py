"""Datastore: discovery + scraping behind EndpointSource, staleness, wiring from the picker's flags."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from aiohttp import web

from smetric.epp.datastore import Datastore, build_datastore
from smetric.epp.discovery.standalone import StaticDiscovery
from smetric.epp.index.approximate import ApproximateIndex
from smetric.epp.index.precise import PreciseIndex
from smetric.epp.scrape.scraper import ScrapeManager
from smetric.epp.settings import PickerSettings
from tests.support.scrape_text import VLLM_TEXT


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def _serve() -> tuple[web.AppRunner, int]:
    app = web.Application()

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=VLLM_TEXT)

    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


async def test_datastore_serves_metrics_and_staleness() -> None:
    runner, port = await _serve()
    live, dead = f"127.0.0.1:{port}", "127.0.0.1:1"
    clock = _Clock()
    index = ApproximateIndex(block_tokens=32)
    ds = Datastore(
        StaticDiscovery.from_spec(f"{live},{dead}=decode", kv_events_port=0),
        ScrapeManager(interval_s=0.01, timeout_s=0.5, clock=clock),
        index,
        staleness_threshold_s=2.0,
        clock=clock,
    )
    await ds.start()
    try:
        assert [e.address for e in ds.ready_endpoints()] == [live, dead]
        assert ds.is_stale(live) and ds.is_stale(dead)  # nothing scraped yet
        for _ in range(500):
            if ds.metrics(live) is not None:
                break
            await asyncio.sleep(0.01)
        m = ds.metrics(live)
        assert m is not None and m.running == 5 and m.kv_capacity_tokens == 4000 * 32
        assert not ds.is_stale(live)
        assert ds.is_stale(dead) and ds.metrics(dead) is None
        assert ds.capacity_blocks(live) == 4000 and ds.capacity_blocks(dead) is None
        await ds.scraper.stop()  # scraping stops: the last metrics age past the threshold
        clock.now += 2.5
        assert ds.is_stale(live)
    finally:
        await ds.stop()
        await runner.cleanup()


async def test_an_endpoint_sent_too_many_requests_since_its_last_scrape_is_stale_until_the_next() -> None:
    """A frozen engine still has fresh metrics for up to the scrape interval + timeout: the cap
    bounds the requests it gets meanwhile; a newer scrape (the engine answered) lifts it."""
    runner, port = await _serve()
    live = f"127.0.0.1:{port}"
    clock = _Clock()
    ds = Datastore(
        StaticDiscovery.from_spec(live, kv_events_port=0),
        ScrapeManager(interval_s=0.01, timeout_s=0.5, clock=clock),
        ApproximateIndex(block_tokens=32),
        staleness_threshold_s=2.0,
        clock=clock,
        max_requests_per_scrape=3,
    )
    await ds.start()
    try:
        for _ in range(500):
            if ds.metrics(live) is not None:
                break
            await asyncio.sleep(0.01)
        await ds.scraper.stop()  # no newer scrape from here on: the engine "froze"
        for _ in range(2):
            ds.dispatched(live)
        assert not ds.is_stale(live)  # 2 < 3
        ds.dispatched(live)
        assert ds.is_stale(live)  # the third request since the last scrape: no more until one answers
        clock.now += 0.05
        assert await ds.scraper.scrape_once(live)  # the engine answers a scrape again
        assert not ds.is_stale(live)  # a newer scrape answered: the count starts again
        ds.dispatched(live)
        assert not ds.is_stale(live)
    finally:
        await ds.stop()
        await runner.cleanup()


def test_the_request_cap_is_on_by_default_and_0_turns_it_off() -> None:
    assert PickerSettings.defaults().max_requests_per_scrape == 32
    ds = build_datastore(
        PickerSettings.from_argv(["--endpoints", "10.0.0.1:8000", "--max-requests-per-scrape=0"])
    )
    for _ in range(100):
        ds.dispatched("10.0.0.1:8000")
    assert ds._unconfirmed == {}


def test_build_from_flags() -> None:
    approx = build_datastore(PickerSettings.from_argv(["--endpoints", "10.0.0.1:8000"]))
    assert isinstance(approx.index, ApproximateIndex)
    precise = build_datastore(
        PickerSettings.from_argv(
            ["--endpoints", "10.0.0.1:8000", "--prefix-index", "precise", "--block-size", "32"]
        )
    )
    assert isinstance(precise.index, PreciseIndex) and precise.index.block_size == 32
    with pytest.raises(ValueError, match="required"):
        build_datastore(PickerSettings.from_argv([]))
    with pytest.raises(SystemExit):  # the flag table's choices refuse it
        PickerSettings.from_argv(["--endpoints", "10.0.0.1:8000", "--prefix-index", "magic"])
    settings = PickerSettings.from_argv(["--endpoints", "10.0.0.1:8000"])
    with pytest.raises(ValueError, match="prefix-index"):  # settings built without the flag table
        build_datastore(dataclasses.replace(settings, prefix_index="magic"))
