"""A frozen engine through real Envoy (pool cluster) and the picker's real gRPC server: one of two
backends accepts requests and never answers them (its /metrics still answers, so the picker keeps
choosing it). Every request sent to it is reset after the gateway's per-try idle timeout and
retried on the picker's next fallback: all get 200 from the other backend, none waits much longer
than that timeout. With the per-try idle timeout off they wait for the stream idle timeout and get
504."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import aiohttp
import orjson
import pytest
from prometheus_client import CollectorRegistry

from smetric.epp.config import parse_config, policy_params
from smetric.epp.datastore import build_datastore
from smetric.epp.envoy import EnvoyOptions, EnvoyProcess, bootstrap, free_port
from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.server.app import PickerServer, build_picker
from smetric.epp.server.servicer import ExtProcServicer
from smetric.epp.settings import PickerSettings
from tests.support.envoy_stack import Backend, session_body

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PER_TRY_S = 2.0
IDLE_S = 8.0


@asynccontextmanager
async def _stack(**envoy: Any) -> AsyncIterator[tuple[str, Backend, Backend]]:
    async with AsyncExitStack() as stack:
        frozen, good = Backend("127.0.0.1"), Backend("127.0.0.2")
        frozen.held = asyncio.Event()  # never set: it never answers a request
        for b in (frozen, good):
            await b.start()
            stack.push_async_callback(b.stop)
        stack.callback(frozen.held.set)  # let its handlers end before the backend stops
        spec = f"{frozen.address},{good.address}"
        ds = build_datastore(PickerSettings.from_argv(["--endpoints", spec, "--refresh-interval-ms", "50"]))
        await ds.start()
        stack.push_async_callback(ds.stop)
        cfg = parse_config({"policy": {"name": "smetric"}}, "test")
        picker = build_picker(cfg, policy_params(cfg), ds, ds.index, staleness_s=2.0, is_stale=ds.is_stale)
        server = PickerServer(
            ExtProcServicer(picker, PickerMetrics(CollectorRegistry())), None, grpc_port=0, health_port=None
        )
        await server.start()
        stack.push_async_callback(server.stop, 0)
        opts = EnvoyOptions(
            listen_port=free_port(),
            admin_port=free_port(),
            picker_port=server.grpc_port,
            pool_endpoints=(frozen.address, good.address),
            stream_idle_timeout_s=IDLE_S,
            served_by_header=True,
            **envoy,
        )
        proc = EnvoyProcess(bootstrap(opts))
        await proc.start()
        stack.push_async_callback(proc.stop)
        while len(ds.ready_endpoints()) < 2:
            await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{opts.listen_port}", frozen, good


async def _send(url: str, n: int) -> list[tuple[int, str, float]]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=IDLE_S * 3)) as client:

        async def one(i: int) -> tuple[int, str, float]:
            t0 = time.monotonic()
            body = orjson.dumps(session_body(f"frozen-{i}", 0))
            async with client.post(url + "/v1/chat/completions", data=body) as r:
                await r.read()
                return r.status, r.headers.get("x-smetric-served-by", ""), time.monotonic() - t0

        return await asyncio.gather(*(one(i) for i in range(n)))


async def test_requests_sent_to_a_frozen_engine_are_retried_elsewhere() -> None:
    async with _stack(per_try_idle_timeout_s=PER_TRY_S) as (url, frozen, good):
        results = await _send(url, 8)
    assert frozen.seen, "the picker never chose the frozen backend: the test saw nothing"
    assert all(status == 200 and served == good.address for status, served, _ in results), results
    assert max(e for _, _, e in results) < PER_TRY_S + 3.0, results
