"""Scraping: real Prometheus text parsing of vLLM metrics, and the scrape loop against a real HTTP server."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiohttp import web

from smetric.epp.scrape.parse import MetricsParseError, parse_vllm_metrics
from smetric.epp.scrape.scraper import ScrapeManager
from tests.support.scrape_text import VLLM_TEXT

OLD_TEXT = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 1
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 4
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.75
# TYPE vllm:gpu_prefix_cache_queries counter
vllm:gpu_prefix_cache_queries_total{model_name="m"} 10
# TYPE vllm:gpu_prefix_cache_hits counter
vllm:gpu_prefix_cache_hits_total{model_name="m"} 5
"""


def test_parse_sums_engines_and_reads_cache_config() -> None:
    parsed = parse_vllm_metrics(VLLM_TEXT, scraped_at_s=12.0)
    m = parsed.metrics
    assert (m.running, m.waiting) == (5, 1)
    assert m.kv_usage == pytest.approx((0.5 * 1000 + 0.25 * 3000) / 4000)
    assert m.kv_capacity_tokens == 4000 * 32 and m.block_size == 32
    assert (m.prefix_cache_queries, m.prefix_cache_hits) == (1500.0, 640.0)
    assert m.scraped_at_s == 12.0
    assert parsed.cache.hash_algo == "sha256" and parsed.cache.num_gpu_blocks == 4000


def test_parse_older_names_without_cache_info() -> None:
    m = parse_vllm_metrics(OLD_TEXT, 0.0).metrics
    assert (m.running, m.waiting, m.kv_usage) == (1, 4, 0.75)
    assert (m.prefix_cache_queries, m.prefix_cache_hits) == (10.0, 5.0)
    assert m.kv_capacity_tokens == 0 and m.block_size == 0


def test_parse_rejects_non_vllm_text() -> None:
    with pytest.raises(MetricsParseError):
        parse_vllm_metrics("# TYPE up gauge\nup 1\n", 0.0)
    with pytest.raises(MetricsParseError):
        parse_vllm_metrics("this is { not prometheus", 0.0)


async def test_scrape_loop_updates_and_marks_dead_once(caplog: pytest.LogCaptureFixture) -> None:
    state = {"status": 200, "hits": 0}

    async def metrics(_: web.Request) -> web.Response:
        state["hits"] += 1
        return web.Response(status=state["status"], text=VLLM_TEXT)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    address = f"127.0.0.1:{port}"
    scraper = ScrapeManager(interval_s=0.01, timeout_s=1.0)
    scraper_log = "smetric.epp.scrape.scraper"  # (this fake has no /v1/models: the model lister logs that)
    caplog.set_level(logging.INFO, logger=scraper_log)
    try:
        assert scraper.is_down(address)
        scraper.sync([address])
        for _ in range(500):
            if state["hits"] >= 3:
                break
            await asyncio.sleep(0.01)
        m = scraper.metrics(address)
        assert m is not None and m.running == 5 and not scraper.is_down(address)
        state["status"] = 500
        hits = state["hits"]
        for _ in range(500):
            if state["hits"] >= hits + 5:
                break
            await asyncio.sleep(0.01)
        assert scraper.is_down(address)
        assert scraper.metrics(address) == m  # the last good metrics stay (and age)
        state["status"] = 200
        for _ in range(500):
            if not scraper.is_down(address):
                break
            await asyncio.sleep(0.01)
        assert not scraper.is_down(address)
        failures = [r for r in caplog.records if r.name == scraper_log and "failed" in r.getMessage()]
        assert len(failures) == 1  # logged per state change, not per scrape
        assert any("recovered" in r.getMessage() for r in caplog.records)
        scraper.sync([])
        assert scraper.metrics(address) is None
    finally:
        await scraper.stop()
        await runner.cleanup()


async def test_connection_refused_is_down() -> None:
    scraper = ScrapeManager(interval_s=10.0, timeout_s=0.5)
    scraper.sync(["127.0.0.1:1"])
    try:
        assert not await scraper.scrape_once("127.0.0.1:1")
        assert scraper.is_down("127.0.0.1:1") and scraper.failures >= 1
    finally:
        await scraper.stop()
