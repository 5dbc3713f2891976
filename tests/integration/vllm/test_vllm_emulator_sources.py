"""The picker's data sources against the vLLM emulator as a real process (``smetric emulate``).

Cross-checks the two sides that must agree without a real engine: the emulator's ``/metrics`` and
ZMQ KV events (vLLM 0.32 wire format) feed the datastore, and the precise index (shared fallback
tokenizer, shared hash seed and block size) finds the emulator's cached blocks on the instance that
served a conversation and on no other.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from smetric.core.blockhash import BlockHasher
from smetric.core.tokenizer import FallbackTokenizer
from smetric.emulator.ports import free_port_block
from smetric.epp.contracts import EndpointInfo
from smetric.epp.datastore import Datastore
from smetric.epp.discovery.standalone import StaticDiscovery
from smetric.epp.index.precise import PreciseIndex
from smetric.epp.kvevents.store import BlockStore
from smetric.epp.kvevents.subscriber import KvEventManager
from smetric.epp.scrape.scraper import ScrapeManager

pytestmark = pytest.mark.integration

BLOCK = 16


@pytest_asyncio.fixture
async def emulator(tmp_path: Path) -> AsyncIterator[tuple[list[str], list[str]]]:
    http, kv = free_port_block(2), free_port_block(2)
    cmd = [sys.executable, "-m", "smetric.core.cli", "emulate", "--instances", "2"]
    cmd += ["--port", str(http), "--kv-events-port", str(kv), "--block-size", str(BLOCK)]
    cmd += ["--hash-seed", "0", "--time-scale", "0.01", "--model", "tiny"]
    log = (tmp_path / "emulator.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    addresses = [f"127.0.0.1:{http + i}" for i in range(2)]
    try:
        deadline = time.monotonic() + 30
        async with aiohttp.ClientSession() as session:
            for a in addresses:
                while True:
                    if proc.poll() is not None:
                        pytest.fail(f"emulator exited: {(tmp_path / 'emulator.log').read_text()[-2000:]}")
                    with contextlib.suppress(aiohttp.ClientError):
                        async with session.get(f"http://{a}/health") as r:
                            if r.status == 200:
                                break
                    if time.monotonic() > deadline:
                        pytest.fail("emulator not healthy in 30 s")
                    await asyncio.sleep(0.1)
        yield addresses, [f"tcp://127.0.0.1:{kv + i}" for i in range(2)]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
        log.close()


async def _until(cond: object, what: str, timeout_s: float = 10.0) -> None:
    assert callable(cond)
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def test_emulator_metrics_and_kv_events_feed_the_precise_index(
    emulator: tuple[list[str], list[str]],
) -> None:
    addresses, kv = emulator
    store = BlockStore()
    index = PreciseIndex(FallbackTokenizer(), BlockHasher(BLOCK, "0"), store)
    endpoints = [EndpointInfo(a, kv_events_endpoint=k) for a, k in zip(addresses, kv, strict=True)]
    gaps: list[str] = []
    ds = Datastore(StaticDiscovery(endpoints), ScrapeManager(0.05), index, KvEventManager(store, gaps.append))
    await ds.start()
    try:
        await _until(lambda: all(ds.metrics(a) is not None for a in addresses), "first scrapes")
        for a in addresses:
            m = ds.metrics(a)
            assert m is not None and m.block_size == BLOCK and m.kv_capacity_tokens > 0
            assert not ds.is_stale(a)
        await asyncio.sleep(0.5)  # let the SUB sockets connect (ZMQ slow joiner)
        messages = [
            {"role": "system", "content": "You are a coding agent. " * 20},
            {"role": "user", "content": "Fix the failing test in tests/test_io.py, please. " * 10},
        ]
        key = index.key_messages(messages)
        assert len(key.block_keys) >= 4
        async with aiohttp.ClientSession() as http:
            body = {"model": "tiny", "messages": messages, "max_tokens": 8}
            async with http.post(f"http://{addresses[0]}/v1/chat/completions", json=body) as r:
                assert r.status == 200, await r.text()
                usage = (await r.json())["usage"]
        assert usage["prompt_tokens"] == key.prompt_tokens
        full = len(key.block_keys) * BLOCK
        await _until(
            lambda: index.local_hits(key, addresses) == {addresses[0]: full, addresses[1]: 0}, "hits"
        )
        assert gaps == []
    finally:
        await ds.stop()
