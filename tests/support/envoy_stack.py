"""Shared stacks of the Envoy tests: real Envoy + the picker (grpc.aio, real datastore: static discovery,
/metrics scraping, approximate index) + small aiohttp model servers that report which address served them."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry

from smetric.epp.config import PickerConfig, parse_config, policy_params
from smetric.epp.datastore import Datastore, build_datastore
from smetric.epp.envoy import EnvoyOptions, EnvoyProcess, bootstrap, free_port
from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.server.app import PickerServer, build_picker
from smetric.epp.server.servicer import ExtProcServicer, ServicerSettings
from smetric.epp.settings import PickerSettings

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


class Dying(Backend):
    """Closes every generation request's connection before answering (a reset before the
    response); its /metrics answers, so the picker keeps choosing it."""

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(request.headers.get("x-request-id", ""))
        assert request.transport is not None
        request.transport.abort()
        return web.Response(status=500)  # never reaches the client: the connection is gone


async def picker_and_envoy(
    stack: AsyncExitStack,
    backends: Sequence[Backend],
    *,
    pool: bool,
    settings: ServicerSettings | None = None,
    mutate: Callable[[dict[str, Any]], None] | None = None,
    **envoy: Any,
) -> str:
    """The picker (``smetric``, 50 ms scrapes, over ``backends``) and Envoy in front of it, each
    stopped by ``stack``: the served-by header, the pool cluster over the backends when ``pool``,
    ``envoy`` more EnvoyOptions, ``mutate`` applied to the bootstrap. Returns Envoy's URL once every
    backend is ready."""
    addresses = tuple(b.address for b in backends)
    ds = build_datastore(
        PickerSettings.from_argv(["--endpoints", ",".join(addresses), "--refresh-interval-ms", "50"])
    )
    await ds.start()
    stack.push_async_callback(ds.stop)
    cfg = parse_config({"policy": {"name": "smetric"}}, "test")
    picker = build_picker(cfg, policy_params(cfg), ds, ds.index, staleness_s=2.0, is_stale=ds.is_stale)
    server = PickerServer(
        ExtProcServicer(picker, PickerMetrics(CollectorRegistry()), settings),
        None,
        grpc_port=0,
        health_port=None,
    )
    await server.start()
    stack.push_async_callback(server.stop, 0)
    opts = EnvoyOptions(
        listen_port=free_port(),
        admin_port=free_port(),
        picker_port=server.grpc_port,
        pool_endpoints=addresses if pool else (),
        served_by_header=True,
        **envoy,
    )
    config = bootstrap(opts)
    if mutate is not None:
        mutate(config)
    proc = EnvoyProcess(config)
    await proc.start()
    stack.push_async_callback(proc.stop)
    while len(ds.ready_endpoints()) < len(backends):
        await asyncio.sleep(0.05)
    return f"http://127.0.0.1:{opts.listen_port}"


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


SYSTEM = "You are a coding agent. " * 40


def session_body(sid: str, turns: int, stream: bool = False) -> dict[str, object]:
    messages: list[dict[str, str]] = [{"role": "system", "content": f"[{sid}] {SYSTEM}"}]
    for t in range(turns):
        messages.append({"role": "user", "content": f"step {t}: run the tests " * 10})
        messages.append({"role": "assistant", "content": f"ran step {t}; output " * 10})
    messages.append({"role": "user", "content": "next step please " * 5})
    return {"model": "m", "messages": messages, "stream": stream}


@asynccontextmanager
async def one_backend_stack(limit: int = 64, **envoy: Any) -> AsyncIterator[tuple[str, ExtProcServicer]]:
    """One backend, the picker (admission limit ``limit``, budget 60 s), Envoy with ``envoy``."""
    async with AsyncExitStack() as stack:
        backend = Backend("127.0.0.1")
        await backend.start()
        stack.push_async_callback(backend.stop)
        ds = build_datastore(
            PickerSettings.from_argv(["--endpoints", backend.address, "--refresh-interval-ms", "50"])
        )
        await ds.start()
        stack.push_async_callback(ds.stop)
        cfg = parse_config({"policy": {"name": "smetric"}}, "test")
        picker = build_picker(cfg, policy_params(cfg), ds, ds.index, staleness_s=2.0, is_stale=ds.is_stale)
        settings = ServicerSettings(max_inflight_decisions=limit, decision_budget_s=60.0)
        servicer = ExtProcServicer(picker, PickerMetrics(CollectorRegistry()), settings)
        server = PickerServer(servicer, None, host="127.0.0.1", grpc_port=0, health_port=None)
        await server.start()
        stack.push_async_callback(server.stop, 0)
        opts = EnvoyOptions(
            listen_port=free_port(), admin_port=free_port(), picker_port=server.grpc_port, **envoy
        )
        proc = EnvoyProcess(bootstrap(opts))
        await proc.start()
        stack.push_async_callback(proc.stop)
        while not ds.ready_endpoints():
            await asyncio.sleep(0.05)
        yield f"127.0.0.1:{opts.listen_port}", servicer
