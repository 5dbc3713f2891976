"""Data sources: hostile /metrics pages, KV-event floods, removed endpoints, listeners."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiohttp import web

from smetric.core.pickerflags import build_parser
from smetric.epp.kvevents.events import BlockRemoved, BlockStored
from smetric.epp.kvevents.store import BlockStore
from smetric.epp.scrape.parse import MetricsParseError, parse_vllm_metrics
from smetric.epp.scrape.scraper import ScrapeManager

GOOD = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0"} 2
vllm:num_requests_waiting{engine="0"} 1
vllm:kv_cache_usage_perc{engine="0"} 0.5
vllm:cache_config_info{block_size="16",num_gpu_blocks="100",engine="0"} 1
"""


@pytest.mark.parametrize("bad", ["NaN", "+Inf", "-3"])
def test_nan_infinite_or_negative_values_refuse_the_page(bad: str) -> None:
    text = GOOD.replace(
        'vllm:num_requests_waiting{engine="0"} 1', f'vllm:num_requests_waiting{{engine="0"}} {bad}'
    )
    with pytest.raises(MetricsParseError, match="refused"):
        parse_vllm_metrics(text, 0.0)
    odd = GOOD.replace('num_gpu_blocks="100"', 'num_gpu_blocks="inf"')  # a label, not a value
    assert parse_vllm_metrics(odd, 0.0).cache.num_gpu_blocks == 0


def test_unread_series_are_not_parsed() -> None:
    junk = "".join(f'other_histogram_bucket{{le="{i}"}} {i}\n' for i in range(1000)) + "garbage {{{ line\n"
    parsed = parse_vllm_metrics(junk + GOOD, 0.0)  # the junk never reaches the parser
    assert parsed.metrics.running == 2 and parsed.cache.num_gpu_blocks == 100


async def _serve(pages: dict[str, str]) -> tuple[web.AppRunner, str]:
    app = web.Application()

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=pages["now"])

    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"127.0.0.1:{port}"


async def test_nan_page_is_logged_once_and_huge_pages_are_refused(caplog: pytest.LogCaptureFixture) -> None:
    pages = {"now": GOOD.replace("} 2\n", "} NaN\n", 1)}
    runner, address = await _serve(pages)
    scraper = ScrapeManager(interval_s=10.0, timeout_s=1.0, max_page_bytes=64 * 1024)
    scraper.sync([])  # no loops: scrape by hand
    scraper._session = None
    try:
        scraper.sync([address])
        await asyncio.sleep(0)
        with caplog.at_level(logging.INFO, logger="smetric.epp.scrape.scraper"):
            for _ in range(5):
                assert not await scraper.scrape_once(address)
        lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(lines) == 1 and "NaN" in lines[0].getMessage() and not lines[0].exc_info
        pages["now"] = GOOD + "#" * (100 * 1024) + "\n"
        assert not await scraper.scrape_once(address)
        pages["now"] = GOOD
        assert await scraper.scrape_once(address)
        assert scraper.metrics(address) is not None
    finally:
        await scraper.stop()
        await runner.cleanup()


def stored(hashes: tuple[int, ...]) -> BlockStored:
    return BlockStored(hashes, None, 16, None)


def test_block_store_is_capped_by_the_engines_block_count_lru() -> None:
    caps = {"a": 100}
    store = BlockStore(capacity=caps.get, slack=1.0, default_max_blocks=1000)
    store.apply("a", [stored(tuple(range(150)))])
    blocks = store.blocks("a")
    assert blocks is not None and len(blocks) == 101 and 149 in blocks and 0 not in blocks
    store.apply("a", [stored((60,)), stored(tuple(range(1000, 1050)))])
    assert 60 in store.blocks("a")  # type: ignore[operator]  # re-stored: recent again, kept
    assert store.evicted > 0
    store.apply("b", [stored(tuple(range(5000)))])  # not scraped yet: the default
    assert store.size("b") == 1000
    store.apply("b", [BlockRemoved((4999,), None)])
    assert store.size("b") == 999


def test_every_listener_has_a_bind_address_and_bounds_have_flags() -> None:
    args = build_parser().parse_args(
        [
            "--bind-address=127.0.0.1",
            "--scrape-timeout-ms=250",
            "--scrape-max-bytes=1000",
            "--body-budget-bytes=5",
        ]
    )
    assert (args.bind_address, args.scrape_timeout_ms, args.scrape_max_bytes, args.body_budget_bytes) == (
        "127.0.0.1",
        250,
        1000,
        5,
    )


async def test_removed_endpoints_are_forgotten_by_the_rate_estimator() -> None:
    from smetric.epp.contracts import EndpointInfo
    from smetric.epp.datastore import Datastore
    from smetric.epp.discovery.standalone import StaticDiscovery
    from smetric.epp.index.approximate import ApproximateIndex
    from smetric.router import PrefillRateEstimator

    rates = PrefillRateEstimator()
    ds = Datastore(
        StaticDiscovery.from_spec("10.0.0.9:1", 0), ScrapeManager(10.0), ApproximateIndex(block_tokens=16)
    )
    ds.on_removed(rates.forget)
    for _ in range(10):
        rates.observe("10.0.0.9:1", 1.0, 0.5)
    ds._on_endpoints([EndpointInfo("10.0.0.9:1")])
    assert rates.samples("10.0.0.9:1") == 10
    ds._on_endpoints([])
    assert rates.samples("10.0.0.9:1") == 0  # before: kept forever
    await ds.stop()
