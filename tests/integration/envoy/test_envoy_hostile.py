"""Real Envoy (the generated bootstrap) + the picker in process + small
model servers. A stopped picker fails requests in bounded time, client routing headers cannot steer,
non-inference paths are 404, resets before the response retry on the picker's fallbacks, FailOpen
lands on a pool endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from smetric.epp.config import parse_config, policy_params
from smetric.epp.datastore import build_datastore
from smetric.epp.envoy import EnvoyOptions, EnvoyProcess, bootstrap, free_port
from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.server.app import PickerServer, build_picker
from smetric.epp.server.outlier import OutlierDetector
from smetric.epp.server.servicer import ExtProcServicer, ServicerSettings
from smetric.epp.settings import PickerSettings
from tests.support.envoy_stack import Backend, _wait_fresh, session_body

pytestmark = pytest.mark.integration

IPS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


class Resetting(Backend):
    """Scraped as healthy, but drops every inference request's connection before answering."""

    async def chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.seen.append("reset")
        assert request.transport is not None
        request.transport.abort()
        await asyncio.sleep(5)
        return web.Response(status=500)


class Refusing(Backend):
    """Scraped as healthy (idle), but answers every inference request with ``status`` at once."""

    status: int = 503

    async def chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.seen.append("refused")
        return web.json_response({"error": {"message": "refused", "code": self.status}}, status=self.status)


async def _envoy(opts: EnvoyOptions) -> EnvoyProcess:
    envoy = EnvoyProcess(bootstrap(opts))
    await envoy.start()
    return envoy


async def _post(
    url: str, body: dict[str, object], headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    timeout = aiohttp.ClientTimeout(total=30)
    async with (
        aiohttp.ClientSession(timeout=timeout) as s,
        s.post(url, json=body, headers=headers or {}) as r,
    ):
        return r.status, await r.read()


async def test_a_stopped_picker_fails_requests_within_the_keepalive_bound() -> None:
    """FULL_DUPLEX_STREAMED runs no message timeout: before the PING keepalive this hung > 40 s."""
    with socket.socket() as stalled:  # accepts TCP (backlog) and never answers, like SIGSTOP
        stalled.bind(("127.0.0.1", 0))
        stalled.listen(64)
        opts = EnvoyOptions(
            listen_port=free_port(), admin_port=free_port(), picker_port=stalled.getsockname()[1]
        )
        envoy = await _envoy(opts)
        try:
            t0 = time.monotonic()
            status, _ = await _post(
                f"http://127.0.0.1:{opts.listen_port}/v1/chat/completions", session_body("x", 0)
            )
            elapsed = time.monotonic() - t0
        finally:
            await envoy.stop()
    assert status == 500 and elapsed < 2 * opts.picker_keepalive_s + 3.0


async def _picker_stack(
    backends: list[Backend], settings: ServicerSettings | None = None, *flags: str
) -> tuple[PickerServer, object]:
    s = PickerSettings.from_argv(["--endpoints", ",".join(b.address for b in backends), *flags])
    ds = build_datastore(s)
    await ds.start()
    cfg = parse_config({"policy": {"name": "smetric"}}, "test")
    picker = build_picker(
        cfg,
        policy_params(cfg),
        ds,
        ds.index,
        staleness_s=2.0,
        is_stale=ds.is_stale,
        outliers=OutlierDetector(s.outlier),
    )
    servicer = ExtProcServicer(
        picker,
        PickerMetrics(CollectorRegistry()),
        settings,
    )
    server = PickerServer(servicer, None, host="127.0.0.1", grpc_port=0, health_port=None)
    await server.start()
    await _wait_fresh(ds, [b.address for b in backends])
    return server, ds


@contextlib.asynccontextmanager
async def _gateway(backends: list[Backend]) -> AsyncIterator[EnvoyOptions]:
    """The backends, a picker over them and Envoy in front (its options: the ports), all stopped on exit."""
    for b in backends:
        await b.start()
    server, ds = await _picker_stack(backends)
    opts = EnvoyOptions(
        listen_port=free_port(),
        admin_port=free_port(),
        picker_port=server.grpc_port,
        pool_endpoints=tuple(b.address for b in backends),
    )
    envoy = await _envoy(opts)
    try:
        yield opts
    finally:
        await envoy.stop()
        await server.stop(0)
        await ds.stop()  # type: ignore[attr-defined]
        for b in backends:
            await b.stop()


@pytest.fixture
async def pool() -> AsyncIterator[tuple[list[Backend], str, int]]:
    backends: list[Backend] = [Backend(IPS[0]), Backend(IPS[1]), Resetting(IPS[2])]
    async with _gateway(backends) as opts:
        yield backends, f"http://127.0.0.1:{opts.listen_port}", opts.admin_port


async def test_resets_before_the_response_retry_on_the_pickers_fallbacks(
    pool: tuple[list[Backend], str, int],
) -> None:
    backends, url, _ = pool
    served = []
    for i in range(9):  # new sessions spread over all three: the resetting one is primary for some
        status, body = await _post(url + "/v1/chat/completions", session_body(f"f{i}", 0))
        assert status == 200, body
        served.append(body)
    assert backends[2].seen  # it was chosen (and reset) at least once: those went to a fallback
    assert all(backends[2].address.encode() not in b for b in served)


async def test_client_routing_headers_and_paths_cannot_steer(pool: tuple[list[Backend], str, int]) -> None:
    backends, url, admin_port = pool
    admin = f"127.0.0.1:{admin_port}"
    hostile = {
        "x-gateway-destination-endpoint": admin,
        "x-smetric-destination-primary": admin,
        "x-envoy-original-dst-host": admin,
        "x-prefiller-host-port": "10.9.9.9:1",
        "x-smetric-request-id": "mine",
    }
    status, body = await _post(url + "/v1/chat/completions", session_body("h", 0), hostile)
    assert status == 200 and b'"prefiller":""' in body.replace(b" ", b"")
    assert any(b.address.encode() in body for b in backends[:2])
    for path in ("/healthcheck/fail", "/metrics", "/reset_prefix_cache"):
        status, _ = await _post(url + path, {"model": "m"}, hostile)
        assert status == 404, path
    async with aiohttp.ClientSession() as s, s.get(f"http://{admin}/ready") as r:
        assert r.status == 200 and (await r.text()).strip() == "LIVE"  # admin untouched


async def test_fail_open_lands_on_a_pool_endpoint_and_fail_close_is_a_prompt_500() -> None:
    """A dead picker (connection refused). FailOpen continues without the picker only in BUFFERED
    mode: the override_host fallback round-robins over the pool, whatever destination the client
    wrote. In FULL_DUPLEX_STREAMED Envoy 1.40 answers 500 even with failure_mode_allow (its fail-open
    covers only a stream that fails before the first body chunk is queued, envoy PR #41276)."""
    backend = Backend(IPS[0])
    await backend.start()
    dead_picker = free_port()  # nothing listens: the ext_proc stream cannot open
    hostile = {
        "x-gateway-destination-endpoint": "127.0.0.1:1",
        "x-smetric-destination-primary": "127.0.0.1:1",
    }
    try:
        for mode, fail_open, expected in (
            ("BUFFERED", True, 200),
            ("FULL_DUPLEX_STREAMED", True, 500),
            ("FULL_DUPLEX_STREAMED", False, 500),
        ):
            opts = EnvoyOptions(
                listen_port=free_port(),
                admin_port=free_port(),
                picker_port=dead_picker,
                failure_mode_allow=fail_open,
                request_body_mode=mode,  # type: ignore[arg-type]
                pool_endpoints=(backend.address,),
            )
            envoy = await _envoy(opts)
            try:
                t0 = time.monotonic()
                url = f"http://127.0.0.1:{opts.listen_port}/v1/chat/completions"
                status, body = await _post(url, session_body("o", 0), hostile)
                elapsed = time.monotonic() - t0
            finally:
                await envoy.stop()
            assert status == expected and elapsed < 5.0, (mode, fail_open, status)
            if status == 200:
                assert backend.address.encode() in body
    finally:
        await backend.stop()


async def test_an_overloaded_picker_answers_503_with_retry_after_within_its_budget() -> None:
    """A live picker that cannot decide (here: the body never completes) answers
    503 + retry-after within --decision-budget-ms; before admission control Envoy held the request
    until its stream idle timeout (no ext_proc message timeout in FULL_DUPLEX_STREAMED)."""
    backend = Backend(IPS[0])
    await backend.start()
    server, ds = await _picker_stack([backend], ServicerSettings(decision_budget_s=1.0))
    opts = EnvoyOptions(
        listen_port=free_port(),
        admin_port=free_port(),
        picker_port=server.grpc_port,
        pool_endpoints=(backend.address,),
    )
    envoy = await _envoy(opts)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", opts.listen_port)
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            "content-length: 100000\r\n\r\n"
        )
        writer.write(head.encode() + b'{"model":"m","messages":[{"role":"user","content":"')
        await writer.drain()
        t0 = time.monotonic()
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10.0)
        elapsed = time.monotonic() - t0
        writer.close()
        status, _ = await _post(
            f"http://127.0.0.1:{opts.listen_port}/v1/chat/completions", session_body("ok", 0)
        )
    finally:
        await envoy.stop()
        await server.stop(0)
        await ds.stop()  # type: ignore[attr-defined]
        await backend.stop()
    assert answer.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in answer.lower()
    assert elapsed < 1.0 + 1.5
    assert status == 200


@pytest.mark.parametrize("status", [503, 429, 500])
async def test_an_engine_answering_errors_is_retried_and_ejected(status: int) -> None:
    """One of three engines answers ``status`` with idle metrics: every request still gets 200
    (the gateway retries the status on the picker's next fallback), the picker learns the failed
    attempts from ``x-envoy-attempt-count`` and, after 3, sends the engine nothing more.
    Guard off: with ``EnvoyOptions.retry_on_status=False`` 3 of the 24 got 503; with
    ``--outlier-consecutive-errors=0`` the engine drew 5 more after its third error."""
    bad = Refusing(IPS[2])
    bad.status = status
    backends: list[Backend] = [Backend(IPS[0]), Backend(IPS[1]), bad]
    async with _gateway(backends) as opts:
        url = f"http://127.0.0.1:{opts.listen_port}/v1/chat/completions"
        statuses = []
        third = -1
        for i in range(24):  # new sessions, one at a time: the idle failing engine looks cheapest
            code, _ = await _post(url, session_body(f"e{status}-{i}", 0))
            statuses.append(code)
            if third < 0 and len(bad.seen) == 3:
                third = i
        drawn_after = len(bad.seen) - 3
    assert statuses == [200] * 24
    assert 0 <= third < 12  # it drew its 3 errors early (it looks idle), then nothing more
    assert drawn_after == 0
