"""Real Envoy + the picker (grpc.aio, real datastore: static discovery, /metrics scraping, approximate
index) + small aiohttp model servers that report which address served them."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import aiohttp
import orjson
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from smetric.epp.config import PickerConfig, parse_config, policy_params
from smetric.epp.datastore import Datastore, build_datastore
from smetric.epp.envoy import EnvoyOptions, EnvoyProcess, bootstrap, free_port
from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.server.app import PickerServer, build_picker
from smetric.epp.server.servicer import ExtProcServicer, ServicerSettings
from smetric.epp.settings import PickerSettings

pytestmark = pytest.mark.integration

IPS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")
MAX_BODY = 3 * 1024 * 1024


@dataclass
class Backend:
    """An OpenAI-shaped server: answers with its own address and a digest of the body it got."""

    ip: str
    port: int = 0
    running: int = 0
    waiting: int = 0
    runner: web.AppRunner | None = None
    seen: list[str] = field(default_factory=list)
    held: asyncio.Event | None = None  # when set to an Event, answers wait until it is set

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.chat)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/v1/models", self.models)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        self.port = self.port or free_port(self.ip)
        await web.TCPSite(self.runner, self.ip, self.port).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(request.headers.get("x-request-id", ""))
        if self.held is not None:
            await self.held.wait()
        info = {
            "served_by": self.address,
            "sha256": hashlib.sha256(body).hexdigest(),
            "length": len(body),
            "prefiller": request.headers.get("x-prefiller-host-port", ""),
        }
        usage = {"prompt_tokens": 100, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 40}}
        if not orjson.loads(body).get("stream"):
            return web.json_response({**info, "usage": usage})
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        for event in (
            {"info": info},
            {"choices": [{"delta": {"content": "x"}}]},
            {"choices": [], "usage": usage},
        ):
            await resp.write(b"data: " + orjson.dumps(event) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"served_by": self.address})

    async def metrics(self, request: web.Request) -> web.Response:
        text = (
            f'vllm:num_requests_running{{engine="0",model_name="m"}} {self.running}\n'
            f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {self.waiting}\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.1\n'
            'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="4096"} 1.0\n'
        )
        return web.Response(text=text, content_type="text/plain")


@dataclass
class Stack:
    backends: list[Backend]
    envoy: EnvoyProcess
    datastore: Datastore
    servicer: ExtProcServicer
    url: str
    session: aiohttp.ClientSession

    def backend(self, address: str) -> Backend:
        return next(b for b in self.backends if b.address == address)

    async def post(
        self, body: object, headers: dict[str, str] | None = None, path: str = "/v1/chat/completions"
    ) -> tuple[int, dict[str, object]]:
        data = body if isinstance(body, (bytes, bytearray)) else orjson.dumps(body)
        async with self.session.post(self.url + path, data=data, headers=headers or {}) as r:
            raw = await r.read()
            return r.status, _decode(raw)


def _decode(raw: bytes) -> dict[str, object]:
    if raw.startswith(b"data: "):
        first = raw.split(b"\n\n", 1)[0][6:]
        return dict(orjson.loads(first)["info"])
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {"raw": raw.decode(errors="replace")}
    return doc if isinstance(doc, dict) else {"doc": doc}


async def _wait_fresh(ds: Datastore, addresses: list[str], timeout_s: float = 10.0) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if all(not ds.is_stale(a) for a in addresses):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("backends never scraped")


async def make_stack(
    body_mode: str = "FULL_DUPLEX_STREAMED",
    roles: tuple[str, ...] = (),
    cfg: PickerConfig | None = None,
    response_path: str = "inline",
) -> AsyncIterator[Stack]:
    backends = [Backend(ip) for ip in IPS]
    for b in backends:
        await b.start()
    spec = ",".join(b.address + (f"={roles[i]}" if roles else "") for i, b in enumerate(backends))
    ds = build_datastore(PickerSettings.from_argv(["--endpoints", spec, "--refresh-interval-ms", "50"]))
    await ds.start()
    cfg = cfg or parse_config({"policy": {"name": "smetric"}}, "test")  # the session tests need smetric
    picker = build_picker(cfg, policy_params(cfg), ds, ds.index, staleness_s=2.0, is_stale=ds.is_stale)
    servicer = ExtProcServicer(
        picker,
        PickerMetrics(CollectorRegistry()),
        ServicerSettings(max_body_bytes=MAX_BODY, response_observer=response_path == "observer"),
    )
    server = PickerServer(servicer, None, host="127.0.0.1", grpc_port=0, health_port=None)
    await server.start()
    opts = EnvoyOptions(
        listen_port=free_port(),
        admin_port=free_port(),
        picker_port=server.grpc_port,
        request_body_mode=body_mode,  # type: ignore[arg-type]
        subset_hint_header=True,
        response_path=response_path,  # type: ignore[arg-type]
    )
    envoy = EnvoyProcess(bootstrap(opts))
    await envoy.start()
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
    try:
        await _wait_fresh(ds, [b.address for b in backends])
        yield Stack(backends, envoy, ds, servicer, f"http://127.0.0.1:{opts.listen_port}", session)
    finally:
        await session.close()
        await envoy.stop()
        await server.stop(0)
        await ds.stop()
        for b in backends:
            await b.stop()


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    async for s in make_stack():
        yield s


SYSTEM = "You are a coding agent. " * 40


def session_body(sid: str, turns: int, stream: bool = False) -> dict[str, object]:
    messages: list[dict[str, str]] = [{"role": "system", "content": f"[{sid}] {SYSTEM}"}]
    for t in range(turns):
        messages.append({"role": "user", "content": f"step {t}: run the tests " * 10})
        messages.append({"role": "assistant", "content": f"ran step {t}; output " * 10})
    messages.append({"role": "user", "content": "next step please " * 5})
    return {"model": "m", "messages": messages, "stream": stream}


async def test_multi_turn_session_sticks(stack: Stack) -> None:
    status, first = await stack.post(session_body("s1", 0))
    assert status == 200
    for turns in range(1, 5):
        status, info = await stack.post(session_body("s1", turns, stream=turns % 2 == 0))
        assert status == 200 and info["served_by"] == first["served_by"]
    reg = stack.servicer.metrics.registry
    assert reg.get_sample_value("smetric_epp_decisions_total", {"policy": "smetric", "reason": "stick"}) == 4


async def test_new_sessions_balance(stack: Stack) -> None:
    served = [(await stack.post(session_body(f"new{i}", 0)))[1]["served_by"] for i in range(6)]
    assert len(set(served)) == 3


async def test_overloaded_session_migrates(stack: Stack) -> None:
    """The session's instance still has its prefix but the prefill already dispatched to it (the
    ledger) would push this turn past its TTFT SLO: the turn migrates; with that work done it sticks."""
    _, first = await stack.post(session_body("hot", 0))
    home = stack.backend(str(first["served_by"]))
    home.held = asyncio.Event()
    # two different ~5k-token tool outputs: ~0.8 s of prefill each, TTFT SLO ~1.35 s
    a = session_body("hot", 1)
    a["messages"].append({"role": "user", "content": "first tool output " * 1200})  # type: ignore[attr-defined]
    b = session_body("hot", 1)
    b["messages"].append({"role": "user", "content": "other tool output " * 1200})  # type: ignore[attr-defined]
    task_a = asyncio.create_task(stack.post(a))
    for _ in range(200):
        if len(home.seen) == 2:
            break
        await asyncio.sleep(0.01)
    status, info = await asyncio.wait_for(stack.post(b), 10)
    assert status == 200 and info["served_by"] != home.address
    home.held.set()
    status_a, info_a = await task_a
    assert status_a == 200 and info_a["served_by"] == home.address
    reg = stack.servicer.metrics.registry
    assert (
        reg.get_sample_value("smetric_epp_decisions_total", {"policy": "smetric", "reason": "migrate"}) == 1
    )
    assert reg.get_sample_value("smetric_epp_decisions_total", {"policy": "smetric", "reason": "stick"}) == 1


async def test_dead_endpoint_is_not_chosen(stack: Stack) -> None:
    dead = stack.backends[0]
    await dead.stop()
    for _ in range(100):
        if stack.datastore.is_stale(dead.address):
            break
        await asyncio.sleep(0.05)
    served = {(await stack.post(session_body(f"d{i}", 0)))[1]["served_by"] for i in range(6)}
    assert served and dead.address not in served


async def test_subset_hint_is_honoured(stack: Stack) -> None:
    target = stack.backends[2]
    for i in range(4):
        status, info = await stack.post(
            session_body(f"sub{i}", 0), {"x-gateway-destination-endpoint-subset": f"{target.ip}:1"}
        )
        assert status == 200 and info["served_by"] == target.address
    status, _ = await stack.post(
        session_body("none", 0), {"x-gateway-destination-endpoint-subset": "10.9.9.9:80"}
    )
    assert status == 503


async def test_large_and_streamed_bodies_arrive_intact(stack: Stack) -> None:
    big = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "y" * (1024 * 1024)}]})
    status, info = await stack.post(big)
    assert status == 200 and info["length"] == len(big) and info["sha256"] == hashlib.sha256(big).hexdigest()

    payload = orjson.dumps(session_body("chunked", 2)) + b" " * 200_000

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(payload), 7_000):
            yield payload[i : i + 7_000]
            await asyncio.sleep(0)

    async with stack.session.post(stack.url + "/v1/chat/completions", data=chunks()) as r:
        info = _decode(await r.read())
        assert r.status == 200 and info["sha256"] == hashlib.sha256(payload).hexdigest()


async def test_streaming_response_passes_through_and_feeds_usage(stack: Stack) -> None:
    async with stack.session.post(
        stack.url + "/v1/chat/completions", data=orjson.dumps(session_body("sse", 0, stream=True))
    ) as r:
        raw = await r.read()
    assert r.status == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert raw.endswith(b"data: [DONE]\n\n") and raw.count(b"data: ") == 4
    reg = stack.servicer.metrics.registry
    assert reg.get_sample_value("smetric_epp_usage_tokens_total", {"kind": "cached"}) == 40
    assert reg.get_sample_value("smetric_epp_ttft_seconds_count") == 1
    assert len(stack.servicer.picker.ledger) == 0


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{oops", 400),
        (orjson.dumps({"messages": [{"role": "user", "content": "hi"}]}), 400),
        (orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "z" * (MAX_BODY + 10)}]}), 413),
    ],
    # short ids: pytest puts the test id in PYTEST_CURRENT_TEST, which the Envoy child inherits, and
    # a 3 MiB id is over the kernel's limit for one environment string (E2BIG at exec)
    ids=["not-json", "no-model", "over-the-body-limit"],
)
async def test_malformed_requests_get_the_documented_status(stack: Stack, body: bytes, status: int) -> None:
    got, doc = await stack.post(body)
    assert got == status
    assert doc["error"]["code"] == status  # type: ignore[index]
    assert not any(b.seen for b in stack.backends)


async def test_buffered_mode_routes_and_delivers_the_body() -> None:
    async for s in make_stack("BUFFERED"):
        body = orjson.dumps(session_body("buf", 1))
        status, info = await s.post(body)
        assert status == 200 and info["sha256"] == hashlib.sha256(body).hexdigest()
        status, info2 = await s.post(session_body("buf", 2))
        assert info2["served_by"] == info["served_by"]
        status, _ = await s.post(b"{bad")
        assert status == 400


async def test_pd_disaggregation_routes_to_decode_with_the_prefiller_header() -> None:
    cfg = parse_config(
        {"policy": {"name": "smetric"}, "pdDisaggregation": {"enabled": True}}
    )  # sticky sessions: smetric
    async for s in make_stack(roles=("prefill", "prefill", "decode"), cfg=cfg):
        prefill = {s.backends[0].address, s.backends[1].address}
        prefillers = []
        for turns in range(3):
            status, info = await s.post(session_body("pd", turns))
            assert status == 200 and info["served_by"] == s.backends[2].address
            prefillers.append(info["prefiller"])
        assert prefillers[0] in prefill and len(set(prefillers)) == 1  # the session sticks to its prefill pod


async def test_selective_pd_keeps_later_turns_on_the_decode_pod() -> None:
    """pdDisaggregation.nonCachedTokens: the first turn takes the prefill hop; once the decode pod
    holds the session's prompt, a turn whose new part is short skips it (no x-prefiller-host-port)."""
    cfg = parse_config(
        {"policy": {"name": "smetric"}, "pdDisaggregation": {"enabled": True, "nonCachedTokens": 200}}
    )
    async for s in make_stack(roles=("prefill", "decode", "decode"), cfg=cfg):
        decode = {s.backends[1].address, s.backends[2].address}
        status, first = await s.post(session_body("sel", 0))
        assert status == 200 and first["served_by"] in decode and first["prefiller"]
        for turns in range(1, 4):
            status, info = await s.post(session_body("sel", turns))
            assert status == 200 and info["served_by"] == first["served_by"]
            assert not info["prefiller"]  # about 100 new tokens per turn: under the threshold


async def _until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    for _ in range(int(timeout_s / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition never held")


async def test_observer_response_path_feeds_the_same_observations() -> None:
    """--response-path=observer: Envoy sends the response to a second, observability_mode ext_proc
    stream; sessions still stick, SSE and JSON pass intact, usage/TTFT reach the picker, the ledger
    empties, and a held first token still blocks the ledger (so an overloaded turn migrates)."""
    async for s in make_stack(response_path="observer"):
        await _observer_checks(s)


async def _observer_checks(s: Stack) -> None:
    reg = s.servicer.metrics.registry
    status, first = await s.post(session_body("obs", 0))
    assert status == 200
    for turns in range(1, 4):
        status, info = await s.post(session_body("obs", turns, stream=turns == 2))
        assert status == 200 and info["served_by"] == first["served_by"]
    async with s.session.post(
        s.url + "/v1/chat/completions", data=orjson.dumps(session_body("obs-sse", 0, stream=True))
    ) as r:
        raw = await r.read()
    assert r.status == 200 and raw.endswith(b"data: [DONE]\n\n") and raw.count(b"data: ") == 4
    await _until(lambda: reg.get_sample_value("smetric_epp_ttft_seconds_count") == 2)
    await _until(lambda: len(s.servicer.picker.ledger) == 0)
    assert reg.get_sample_value("smetric_epp_usage_tokens_total", {"kind": "cached"}) == 5 * 40
    assert reg.get_sample_value("smetric_epp_observer_streams_total", {"outcome": "matched"}) == 5

    home = s.backend(str(first["served_by"]))
    home.held = asyncio.Event()
    held = asyncio.create_task(s.post(session_body("obs", 4)))
    await _until(lambda: len(home.seen) == 5)
    assert len(s.servicer.picker.ledger) == 1  # no first byte yet: its prefill is still queued
    home.held.set()
    assert (await held)[0] == 200
    await _until(lambda: len(s.servicer.picker.ledger) == 0)
    assert reg.get_sample_value("smetric_epp_observer_streams_total", {"outcome": "missing"}) is None
