"""The stack ``smetric chaos`` breaks: one emulator process per instance (so one can be killed or
stopped alone), the real picker process, the real Envoy with the hardened bootstrap (pool cluster,
retries, PING keepalive, path allow-list, header scrub), and one in-process "hostile engine" whose
``/metrics`` page the faults make garbage, NaN or huge. Every process goes through the bench's
:class:`~smetric.bench.procs.Supervisor`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from smetric.bench.chaos.guards import Guard, drop_http_filters, envoy_options_without
from smetric.bench.procs import Supervisor, free_port, wait_http_ok
from smetric.bench.stacks import HOST, smetric_argv, wait_grpc_serving

MODEL = "m"
# the fault rows' pickers: flow control off (ChaosStack.start says why)
FLOW_CONTROL_OFF = "flowControl:\n  enabled: false\n"
CHAOS_PICKER_CONFIG = "policy:\n  name: smetric\n" + FLOW_CONTROL_OFF
NO_DONE = "stream ended without [DONE]"  # Reply.error of a stream that ended cleanly, truncated
GOOD_METRICS = (
    'vllm:num_requests_running{engine="0",model_name="m"} 0\n'
    'vllm:num_requests_waiting{engine="0",model_name="m"} 0\n'
    'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.0\n'
    'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="4096"} 1.0\n'
)


@dataclass(frozen=True, slots=True)
class ChaosSettings:
    instances: int = 3
    time_scale: float = 0.1
    # Scaled with the engines, which run 10x faster (long_prefill's ~100k tokens take ~9 s): the
    # per-try idle timeout stays above that prefill and the stream idle timeout above the per-try
    # one, so a frozen stream is cut after both. Unlike the defaults (200 s, 400 s) they leave no
    # room for a long prefill retried after a frozen attempt: no row sends one.
    stream_idle_timeout_s: float = 20.0
    per_try_idle_timeout_s: float = 13.0
    max_model_len: int = 131_072  # agents' long contexts (the preset model's own limit is shorter)
    route_timeout_s: float = 60.0
    state_interval_ms: int = 500
    startup_timeout_s: float = 60.0
    # Admission control: above the load's 100 sessions (so the load row is never shed by the
    # count); the budget is long enough for the slow-upload row to hold its 600 uploads at the
    # picker on a loaded 2-core box before the first is shed.
    max_inflight_decisions: int = 128
    decision_budget_ms: int = 5000
    # Guards switched off (smetric chaos --guard-off): the stack is built without them.
    guards_off: tuple[Guard, ...] = ()


@dataclass
class HostileEngine:
    """An OpenAI-shaped server whose /metrics page the faults control (``mode``)."""

    mode: str = "garbage"  # garbage | nan | huge | good
    port: int = 0
    runner: web.AppRunner | None = None
    huge: bytes = b""
    scrapes: int = 0
    last_scrape: float = 0.0
    worst_scrape_gap_s: float = 0.0  # the longest time between two scrapes (reset by the faults)
    # Where set (chaos.bodies), each gap also as at most the growth of this clock meanwhile (the
    # picker's CPU seconds): ``worst_scrape_gap_cpu_s``.
    cpu_clock: Callable[[], float] | None = None
    last_cpu: float = 0.0
    worst_scrape_gap_cpu_s: float = 0.0

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/v1/chat/completions", self._chat)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        self.port = free_port()
        await web.TCPSite(self.runner, HOST, self.port).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def _metrics(self, _: web.Request) -> web.Response:
        self.scrapes += 1
        now = time.monotonic()
        cpu = self.cpu_clock() if self.cpu_clock is not None else 0.0
        if self.last_scrape:
            self.worst_scrape_gap_s = max(self.worst_scrape_gap_s, now - self.last_scrape)
            own = min(now - self.last_scrape, cpu - self.last_cpu)
            self.worst_scrape_gap_cpu_s = max(self.worst_scrape_gap_cpu_s, own)
        self.last_scrape, self.last_cpu = now, cpu
        if self.mode == "nan":
            return web.Response(
                text=GOOD_METRICS.replace(
                    'running{engine="0",model_name="m"} 0', 'running{engine="0",model_name="m"} NaN'
                )
            )
        if self.mode == "huge":
            if not self.huge:
                self.huge = (GOOD_METRICS + "# padding " + "x" * 100 + "\n").encode() * (
                    24 * 1024 * 1024 // 112
                )
            return web.Response(body=self.huge, content_type="text/plain")
        if self.mode == "good":
            return web.Response(text=GOOD_METRICS)
        return web.Response(text="{{{ this is not prometheus text\nvllm:num_requests_running{ 1 2 3\n")

    async def _chat(self, request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"choices": [{"message": {"content": "hostile engine"}}]})


@dataclass
class Reply:
    """``error``: a transport error's class name (the gateway reset the stream: a truncated body),
    :data:`NO_DONE` (the stream ended cleanly without ``[DONE]``), a client timeout, or empty."""

    status: int
    served: str
    elapsed_s: float
    error: str = ""
    first_byte_s: float | None = None
    body: bytes = b""
    attempts: int = 1  # the gateway's x-envoy-attempt-count: > 1 when an attempt failed and was retried


@dataclass
class ChaosStack:
    sup: Supervisor
    work: Path
    settings: ChaosSettings
    hostile: HostileEngine
    endpoints: list[str] = field(default_factory=list)
    emu_argv: dict[str, list[str]] = field(default_factory=dict)
    picker_argv: list[str] = field(default_factory=list)
    health_target: str = ""
    metrics_url: str = ""
    url: str = ""
    admin_port: int = 0
    picker_port: int = 0
    session: aiohttp.ClientSession | None = None

    # -- processes ------------------------------------------------------------------------------

    async def start(self) -> None:
        s = self.settings
        for i in range(s.instances):
            port, kv_port = free_port(), free_port()
            name = f"engine{i}"
            self.emu_argv[name] = [
                *smetric_argv("emulate"),
                "--instances=1",
                f"--host={HOST}",
                f"--port={port}",
                f"--kv-events-port={kv_port}",
                f"--time-scale={s.time_scale}",
                f"--model={MODEL}",
                "--hash-seed=0",
                f"--max-model-len={s.max_model_len}",
                *(f for g in s.guards_off for f in g.emulator_flags),
            ]
            self.endpoints.append(f"{HOST}:{port}")
            await self.sup.start(name, self.emu_argv[name], env={"PYTHONHASHSEED": "0"})
        await self.hostile.start()
        for e in self.endpoints:
            await wait_http_ok(f"http://{e}/health", self.sup, s.startup_timeout_s, "emulator")
        grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
        pool = [*self.endpoints, self.hostile.address]
        # The restart rows check session stickiness, which the session policy keeps (the picker's
        # default, llmd-slo, balances without a session rule). Flow control (on by default) is
        # off: each row isolates its own guard, and a 429 of the flow control would stand in for
        # it (the ledger row's engine queue, the retries after a kill, the body budget's share);
        # flow control is the load-spike row's guard, with its own picker (chaos/spike.py).
        config = self.work / "picker.yaml"
        config.write_text(CHAOS_PICKER_CONFIG)
        patches = ",".join(p for g in s.guards_off for p in g.picker_patches)
        self.picker_argv = [
            *(
                [sys.executable, "-m", "smetric.bench.chaos.unguarded", patches, "--"]
                if patches
                else smetric_argv("epp")
            ),
            f"--endpoints={','.join(pool)}",
            f"--grpc-port={grpc_port}",
            f"--grpc-health-port={health_port}",
            f"--metrics-port={metrics_port}",
            "--bind-address=127.0.0.1",
            "--secure-serving=false",
            f"--config={config}",
            f"--state-file={self.work / 'picker-state.json'}",
            f"--state-interval-ms={s.state_interval_ms}",
            f"--max-inflight-decisions={s.max_inflight_decisions}",
            f"--decision-budget-ms={s.decision_budget_ms}",
            "--log-level=warning",
            *(f for g in s.guards_off for f in g.picker_flags),
        ]
        self.health_target = f"{HOST}:{health_port}"
        self.metrics_url = f"http://{HOST}:{metrics_port}/metrics"
        await self.start_picker()
        await self.start_envoy(grpc_port, pool)
        if self.session is None:  # wait_fresh may have made it
            self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))

    async def start_picker(self) -> None:
        await self.sup.start("picker", self.picker_argv, env={"PYTHONHASHSEED": "0"})
        await wait_grpc_serving(self.health_target, self.sup, self.settings.startup_timeout_s, "picker")
        await self.wait_fresh()

    async def start_envoy(self, picker_port: int, pool: list[str]) -> None:
        self.picker_port = picker_port
        self.url, self.admin_port = await self.start_gateway("envoy", pool_endpoints=tuple(pool))

    async def start_gateway(self, name: str, **options: Any) -> tuple[str, int]:
        """One more Envoy (``name`` in the supervisor) in front of this stack's picker, with the
        chaos settings, ``options`` (EnvoyOptions fields) and the disabled guards applied.
        Returns its URL and admin port."""
        from smetric.epp.envoy import EnvoyOptions, bootstrap, envoy_binary

        listen_port, admin_port = free_port(), free_port()
        base = EnvoyOptions(
            listen_port=listen_port,
            admin_port=admin_port,
            picker_port=self.picker_port,
            stream_idle_timeout_s=self.settings.stream_idle_timeout_s,
            per_try_idle_timeout_s=self.settings.per_try_idle_timeout_s,
            route_timeout_s=self.settings.route_timeout_s,
            served_by_header=True,
        )
        off = self.settings.guards_off
        config = bootstrap(envoy_options_without(replace(base, **options), off))
        drop_http_filters(config, (f for g in off for f in g.drop_filters))
        path = self.work / f"{name}.json"
        path.write_text(json.dumps(config))
        argv = [str(envoy_binary()), "-c", str(path), "--disable-hot-restart", "--log-level", "error",
                "--concurrency", "1"]  # fmt: skip
        await self.sup.start(name, argv)
        await wait_http_ok(
            f"http://{HOST}:{admin_port}/ready", self.sup, self.settings.startup_timeout_s, name
        )
        return f"http://{HOST}:{listen_port}", admin_port

    def pid(self, name: str) -> int:
        return self.sup.children[name].pid

    def signal(self, name: str, sig: signal.Signals) -> None:
        os.kill(self.pid(name), sig)

    async def kill(self, name: str) -> None:
        self.signal(name, signal.SIGKILL)
        await self.sup.stop(name)  # reap it (and forget it, so check_alive stays quiet)

    async def restart_engine(self, name: str) -> None:
        await self.sup.start(name, self.emu_argv[name], env={"PYTHONHASHSEED": "0"})
        i = int(name.removeprefix("engine"))
        await wait_http_ok(
            f"http://{self.endpoints[i]}/health", self.sup, self.settings.startup_timeout_s, name
        )

    async def engine_fault(self, address: str, spec: dict[str, object]) -> None:
        """Switch an emulated engine's fault (its ``/admin/fault``: ``{"mode": "error", "status":
        503}``, ``{"mode": "dead"}``, ``{"mode": "ok"}``)."""
        assert self.session is not None
        async with self.session.post(
            f"http://{address}/admin/fault", json=spec, timeout=aiohttp.ClientTimeout(total=5)
        ) as r:
            if r.status != 200:
                raise RuntimeError(f"fault {spec} on {address}: HTTP {r.status} {await r.text()}")

    def rss_mb(self, name: str = "picker") -> float:
        """Resident memory of ``name`` and every process under it (the picker's parse workers
        count: memory moved into a child is still the picker pod's)."""
        try:
            pid = self.pid(name)
        except KeyError:
            return 0.0
        return sum(_rss_kb(p) for p in _tree(pid)) / 1024.0

    def picker_log(self) -> str:
        child = self.sup.children.get("picker")
        path = child.log_path if child is not None else self.sup.log_dir / "picker.log"
        try:
            return path.read_text(errors="replace")
        except OSError:
            return ""

    async def picker_metric(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        from prometheus_client.parser import text_string_to_metric_families

        assert self.session is not None
        try:
            async with self.session.get(self.metrics_url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                text = await r.text()
        except (aiohttp.ClientError, TimeoutError):
            return None
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in (labels or {}).items()):
                    return float(sample.value)
        return None

    async def picker_metric_values(self, name: str) -> dict[str, float]:
        """Every sample of a per-endpoint picker metric, by its ``endpoint`` label."""
        from prometheus_client.parser import text_string_to_metric_families

        assert self.session is not None
        try:
            async with self.session.get(self.metrics_url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                text = await r.text()
        except (aiohttp.ClientError, TimeoutError):
            return {}
        return {
            s.labels.get("endpoint", ""): float(s.value)
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == name
        }

    async def wait_fresh(self, timeout_s: float = 20.0) -> None:
        """Until the picker sees every emulated engine fresh (the hostile one stays stale)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.session is None:
                self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
            ready = await self.picker_metric("smetric_epp_ready_endpoints")
            stale = await self.picker_metric("smetric_epp_stale_endpoints")
            if ready is not None and stale is not None and ready - stale >= len(self.endpoints):
                return
            await asyncio.sleep(0.2)

    async def health_latency_s(self) -> float:
        """One grpc.health.v1 Check against the picker (seconds; 99 on failure)."""
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        t0 = time.monotonic()
        try:
            async with grpc.aio.insecure_channel(self.health_target) as ch:
                await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        except grpc.aio.AioRpcError:
            return 99.0
        return time.monotonic() - t0

    async def stop(self) -> None:
        if self.session is not None:
            await self.session.close()
        await self.hostile.stop()

    # -- requests -------------------------------------------------------------------------------

    def engine_name(self, served: str) -> str:
        """``engineN`` for a pool address, else the address itself (or ``-``)."""
        return f"engine{self.endpoints.index(served)}" if served in self.endpoints else (served or "-")

    async def long_stream(
        self, tag: str, timeout_s: float, tokens: int = 20_000, url: str = ""
    ) -> tuple[str, asyncio.Task[Reply]]:
        """A long streaming request, started; returns the engine serving it (once its first bytes
        arrived, plus half a second: well into the stream) and the request's task."""
        served: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        req = asyncio.create_task(
            self.post(
                chat(f"{tag}-{time.monotonic_ns()}", 1, max_tokens=tokens),
                timeout_s=timeout_s,
                served_to=served,
                url=url,
            )
        )
        address = await asyncio.wait_for(served, 30.0)
        await asyncio.sleep(0.5)
        return self.engine_name(address), req

    async def post(
        self,
        body: dict[str, object] | bytes,
        headers: dict[str, str] | None = None,
        path: str = "/v1/chat/completions",
        timeout_s: float = 30.0,
        served_to: asyncio.Future[str] | None = None,
        url: str = "",
    ) -> Reply:
        """One request; streams are read to the end (a cut stream is an error, not a 200).
        ``served_to`` gets the serving endpoint as soon as the response headers arrive; ``url``:
        another gateway than the stack's own."""
        assert self.session is not None
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        hdrs = {"content-type": "application/json", **(headers or {})}
        t0 = time.monotonic()
        first: float | None = None
        status, served, attempts = 0, "", 1
        chunks: list[bytes] = []
        try:
            async with asyncio.timeout(timeout_s):
                async with self.session.post((url or self.url) + path, data=data, headers=hdrs) as r:
                    status, served = r.status, r.headers.get("x-smetric-served-by", "")
                    attempts = int(r.headers.get("x-envoy-attempt-count", "1") or 1)
                    if served_to is not None and not served_to.done():
                        served_to.set_result(served)
                    async for chunk in r.content.iter_any():
                        if first is None:
                            first = time.monotonic() - t0
                        chunks.append(chunk)
                    body_bytes = b"".join(chunks)
                    if (
                        r.headers.get("content-type", "").startswith("text/event-stream")
                        and b"[DONE]" not in body_bytes
                    ):
                        return Reply(
                            status,
                            served,
                            time.monotonic() - t0,
                            NO_DONE,
                            first,
                            body_bytes,
                            attempts,
                        )
                    return Reply(status, served, time.monotonic() - t0, "", first, body_bytes, attempts)
        except TimeoutError:
            return Reply(
                status, served, time.monotonic() - t0, "stuck (client timeout)", first, b"", attempts
            )
        except (aiohttp.ClientError, ConnectionError) as exc:
            return Reply(status, served, time.monotonic() - t0, f"{type(exc).__name__}", first, b"", attempts)


def chat(
    session: str, turns: int, *, stream: bool = True, max_tokens: int = 16, filler: int = 40
) -> dict[str, object]:
    """A multi-turn agent conversation: each turn adds a tool output and the model's answer."""
    messages: list[dict[str, str]] = [
        {"role": "system", "content": f"[{session}] You are a coding agent. " * 20}
    ]
    for t in range(turns):
        messages.append(
            {"role": "user", "content": f"tool output {t} of {session}: " + "line of log " * filler}
        )
        messages.append({"role": "assistant", "content": f"step {t} done for {session}"})
    messages.append({"role": "user", "content": f"continue {session}"})
    return {"model": MODEL, "messages": messages, "stream": stream, "max_tokens": max_tokens}


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (Linux ``/proc/PID/task/TID/children``)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0
