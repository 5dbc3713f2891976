"""Envoy + SMetric picker vs ``vllm-router``, side by side on the same backends.

    python -m smetric.bench.latency.side_by_side [--runs 5] [--requests 300] [--out side.json]

Each run starts, on this machine, fresh processes:

* **canned backends**: one Envoy (``--concurrency 1``) with 8 listeners that answer
  ``/v1/chat/completions`` with a fixed OpenAI-shaped JSON (usage included), ``/metrics`` with an
  idle vLLM page and ``/health`` with 200, so neither router waits on a Python backend;
* **Envoy + picker**: the real ``smetric-epp`` (standalone discovery of the 8 backends, /metrics
  scraped every 50 ms, approximate index, default policy) behind a real Envoy 1.40 that runs it
  **inline**: request FULL_DUPLEX_STREAMED, response headers and body FULL_DUPLEX_STREAMED through
  the picker (what GIE gateways configure; ``--response-path observer`` is not used);
* **vllm-router** (the PyPI Rust router, ``--policy cache_aware``) on the same 8 backends;
* **Envoy alone**: the same Envoy build proxying to one backend, without the picker (reference);
* **Envoy + no-op ext_proc** (the floor of any Python picker): a grpc.aio ext_proc server on the
  picker's event loop that does nothing but route to one backend and echo the bodies (no parsing,
  no index, no policy, no scrapes), behind the same inline Envoy configuration.

One client (aiohttp, one connection per path, sequential) sends the same agentic chat bodies
(8 KiB, 128 KiB, 1 MiB) to ``backend`` (straight to one canned backend), ``envoy``,
``envoy+picker`` and ``vllm-router`` in rotation, request by request, so all paths see the same
machine state. **Added latency** = a path's percentile minus the ``backend`` path's. CPU seconds
per 1,000 requests come from ``/proc/<pid>/stat`` of each router's processes over the run (Envoy
and picker together; vllm-router alone), background work (scrapes, health checks) included.

**Sustained rate** (``--sustained``, needs ``wrk`` on PATH): closed loops of 128 KiB requests at
concurrency 1, 2, 4, ... through Envoy + no-op ext_proc, Envoy + picker and vllm-router; the
highest rate before p99 exceeds twice the concurrency-1 p99, and CPU per request (the picker
process's own too).

Everything shares this machine's cores (2 on the development VM): a proxy's latency includes
waiting for a core that the client, the other proxy or Envoy hold.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp

from smetric.bench.latency.harness import agent_body, spawn, summary_ms, timed_post
from smetric.bench.procs import wait_http_ok
from smetric.epp.envoy import EnvoyOptions, EnvoyProcess, bootstrap, free_port
from smetric.epp.obs.health import wait_serving

PY = sys.executable
SIZES = (8 * 1024, 128 * 1024, 1024 * 1024)
N_BACKENDS = 8
IDLE_VLLM_PAGE = (
    'vllm:num_requests_running{engine="0",model_name="m"} 0\n'
    'vllm:num_requests_waiting{engine="0",model_name="m"} 0\n'
    'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.05\n'
    'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="65536"} 1.0\n'
)
ANSWER = (
    '{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":1}}'
)
_HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
_ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"


def canned_backends(ports: Sequence[int], admin_port: int) -> dict[str, Any]:
    """One Envoy, one listener per backend port, direct responses only (no upstream)."""

    def route(prefix: str, body: str, content_type: str) -> dict[str, Any]:
        return {
            "match": {"prefix": prefix},
            "direct_response": {"status": 200, "body": {"inline_string": body}},
            "response_headers_to_add": [{"header": {"key": "content-type", "value": content_type}}],
        }

    def listener(port: int) -> dict[str, Any]:
        hcm = {
            "@type": _HCM,
            "stat_prefix": f"backend_{port}",
            "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {"@type": _ROUTER}}],
            "route_config": {
                "virtual_hosts": [
                    {
                        "name": "backend",
                        "domains": ["*"],
                        "routes": [
                            route("/metrics", IDLE_VLLM_PAGE, "text/plain"),
                            route("/health", "", "text/plain"),
                            route("/", ANSWER, "application/json"),
                        ],
                    }
                ]
            },
        }
        return {
            "name": f"backend_{port}",
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
            "filter_chains": [
                {"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}]}
            ],
        }

    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}},
        "static_resources": {"listeners": [listener(p) for p in ports]},
    }


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Stack:
    """The processes of one run; ``urls`` by path name, ``pids`` of each router's processes."""

    def __init__(self) -> None:
        self.urls: dict[str, str] = {}
        self.pids: dict[str, list[int]] = {}
        self.picker_pid = 0
        self.backend_ports = [free_port() for _ in range(N_BACKENDS)]

    async def start(self, stack: AsyncExitStack, policy: str) -> None:
        ports = self.backend_ports
        backends = EnvoyProcess(canned_backends(ports, free_port()), concurrency=1)
        await stack.enter_async_context(backends)
        self.urls["backend"] = f"http://127.0.0.1:{ports[0]}/v1/chat/completions"
        # Envoy + picker, response inline
        grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
        argv = [
            PY, "-m", "smetric.epp.main",
            "--endpoints", ",".join(f"127.0.0.1:{p}" for p in ports),
            "--grpc-port", str(grpc_port), "--grpc-health-port", str(health_port),
            "--metrics-port", str(metrics_port), "--log-level", "warning", "--secure-serving=false",
        ]  # fmt: skip
        if policy:
            cfg = Path(tempfile.mkdtemp()) / "picker.yaml"
            cfg.write_text(json.dumps({"policy": {"name": policy}}))
            argv += ["--config", str(cfg)]
        picker = spawn(argv, wait_ready=False)
        stack.callback(picker.stop)
        await wait_serving(f"127.0.0.1:{health_port}", 30.0)
        inline = EnvoyOptions(listen_port=free_port(), admin_port=free_port(), picker_port=grpc_port)
        envoy_picker = EnvoyProcess(bootstrap(inline))
        await stack.enter_async_context(envoy_picker)
        self.urls["envoy+picker"] = f"http://127.0.0.1:{inline.listen_port}/v1/chat/completions"
        assert envoy_picker._proc is not None
        self.pids["envoy+picker"] = [envoy_picker._proc.pid, picker.proc.pid]
        self.picker_pid = picker.proc.pid
        # Envoy alone (reference)
        direct = EnvoyOptions(
            listen_port=free_port(),
            admin_port=free_port(),
            picker_port=grpc_port,
            direct_port=free_port(),
            direct_backend=f"127.0.0.1:{ports[0]}",
        )
        envoy_alone = EnvoyProcess(bootstrap(direct))
        await stack.enter_async_context(envoy_alone)
        self.urls["envoy"] = f"http://127.0.0.1:{direct.direct_port}/v1/chat/completions"
        # Envoy + a no-op ext_proc server (the grpc.aio + Envoy floor)
        noop_port, noop_health = free_port(), free_port()
        noop = spawn(
            [PY, __file__, "--serve-noop", f"{noop_port},{noop_health},127.0.0.1:{ports[1]}"],
            wait_ready=False,
        )
        stack.callback(noop.stop)
        await wait_serving(f"127.0.0.1:{noop_health}", 30.0)
        floor = EnvoyOptions(listen_port=free_port(), admin_port=free_port(), picker_port=noop_port)
        envoy_noop = EnvoyProcess(bootstrap(floor))
        await stack.enter_async_context(envoy_noop)
        assert envoy_noop._proc is not None
        self.urls["envoy+noop"] = f"http://127.0.0.1:{floor.listen_port}/v1/chat/completions"
        self.pids["envoy+noop"] = [envoy_noop._proc.pid, noop.proc.pid]
        # vllm-router on the same backends
        binary = shutil.which("vllm-router", path=str(Path(PY).parent)) or shutil.which("vllm-router")
        if binary is None:
            print("vllm-router is not installed (pip install -e '.[bench]'): its row is skipped")
            return
        port = free_port()
        router = spawn(
            [
                binary, "--host=127.0.0.1", f"--port={port}", "--policy=cache_aware",
                "--worker-urls", *(f"http://127.0.0.1:{p}" for p in ports),
                f"--prometheus-port={free_port()}", "--worker-startup-check-interval=1",
                "--disable-retries", "--disable-circuit-breaker", "--log-level=warning",
            ],
            wait_ready=False,
        )  # fmt: skip
        stack.callback(router.stop)
        await wait_http_ok(f"http://127.0.0.1:{port}/health", None, 60.0, "vllm-router")
        self.urls["vllm-router"] = f"http://127.0.0.1:{port}/v1/chat/completions"
        self.pids["vllm-router"] = [router.proc.pid]


async def serve_noop(port: int, health_port: int, destination: str) -> None:
    """Subprocess mode: the no-op ext_proc server (fixed destination, bodies echoed, nothing else)."""
    import grpc
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    from smetric.epp.server import messages as msgs

    route = {msgs.DEST_HEADER: destination, msgs.PRIMARY_HEADER: destination}

    class Noop(ep_grpc.ExternalProcessorServicer):
        async def Process(self, requests, context):  # type: ignore[no-untyped-def]
            body = bytearray()
            async for m in requests:
                kind = m.WhichOneof("request")
                if kind == "request_body":
                    body += m.request_body.body
                    if m.request_body.end_of_stream:
                        yield msgs.route_headers({**route, "content-length": str(len(body))}, (destination,))
                        for reply in msgs.streamed_chunks(body, True):
                            yield reply
                elif kind == "response_headers":
                    yield msgs.CONTINUE_RESPONSE_HEADERS
                elif kind == "response_body":
                    b = m.response_body
                    for reply in msgs.streamed_chunks(b.body, b.end_of_stream, response=True):
                        yield reply
                elif kind == "response_trailers":
                    yield msgs.CONTINUE_RESPONSE_TRAILERS
                elif kind == "request_trailers":
                    yield msgs.CONTINUE_REQUEST_TRAILERS

    server = grpc.aio.server()
    ep_grpc.add_ExternalProcessorServicer_to_server(Noop(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    checker = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    server.add_insecure_port(f"127.0.0.1:{health_port}")
    await server.start()
    await checker.set("", health_pb2.HealthCheckResponse.SERVING)
    await server.wait_for_termination()


async def warm_post(session: aiohttp.ClientSession, url: str, body: bytes, within_s: float = 30.0) -> None:
    """The first request of a path, retried while it is refused (a 503 until the picker's first
    scrape of the engines answered: on a busy box that can take longer than the start-up sleep)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            await timed_post(session, url, body)
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def one_run(n: int, policy: str) -> dict[str, Any]:
    async with AsyncExitStack() as stack:
        st = Stack()
        await st.start(stack, policy)
        await asyncio.sleep(1.0)  # a few scrapes, health checks
        idle_rate = await idle_cpu_rates(st.pids, 2.0)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as s:
            rows = []
            for size in SIZES:
                rng = random.Random(size)
                bodies = [agent_body(rng, i % 32, i % 4, size) for i in range(n)]
                for url in st.urls.values():  # warm every connection
                    await warm_post(s, url, bodies[0])
                cpu0 = {k: sum(cpu_s(p) for p in pids) for k, pids in st.pids.items()}
                t0 = time.monotonic()
                times: dict[str, list[float]] = {k: [] for k in st.urls}
                for b in bodies:
                    for name, url in st.urls.items():
                        times[name].append(await timed_post(s, url, b))
                elapsed_s = time.monotonic() - t0
                cpu = {k: sum(cpu_s(p) for p in pids) - cpu0[k] for k, pids in st.pids.items()}
                busy = {k: max(0.0, v - idle_rate[k] * elapsed_s) for k, v in cpu.items()}
                rows.append(summarise(size, times, cpu, n, busy))
    return {"sizes": rows, "idle_cpu_share": {k: round(v, 4) for k, v in idle_rate.items()}}


async def idle_cpu_rates(pids: dict[str, list[int]], seconds: float) -> dict[str, float]:
    """CPU seconds per second each router's processes burn with no request (scrapes, health checks)."""
    before = {k: sum(cpu_s(p) for p in ps) for k, ps in pids.items()}
    await asyncio.sleep(seconds)
    return {k: (sum(cpu_s(p) for p in ps) - before[k]) / seconds for k, ps in pids.items()}


def summarise(
    size: int,
    times: dict[str, list[float]],
    cpu: dict[str, float],
    n: int,
    busy: dict[str, float] | None = None,
) -> dict[str, Any]:
    """``cpu``: each router's CPU seconds over the size's requests; ``busy``: the same minus what it
    burns idle over that time (requests rotate over the paths, so a router's background work is
    spread over 1/paths of the wall time's requests)."""
    skip = n // 10
    row: dict[str, Any] = {"body_bytes": size}
    for name, xs in times.items():
        row[name] = summary_ms(xs[skip:])
    base = row["backend"]
    for name in times:
        if name != "backend":
            row[name]["added_p50_ms"] = round(row[name]["p50_ms"] - base["p50_ms"], 3)
            row[name]["added_p99_ms"] = round(row[name]["p99_ms"] - base["p99_ms"], 3)
    for name, seconds in cpu.items():
        row[name]["cpu_s_per_1000"] = round(seconds / n * 1000, 3)
        if busy is not None:
            row[name]["busy_cpu_s_per_1000"] = round(busy[name] / n * 1000, 3)
    if "vllm-router" in row:
        ours, peer = row["envoy+picker"], row["vllm-router"]
        for q in ("p50", "p99"):
            denominator = peer[f"added_{q}_ms"]
            row[f"ratio_added_{q}"] = (
                round(ours[f"added_{q}_ms"] / denominator, 2) if denominator > 0 else None
            )
        if peer["cpu_s_per_1000"] > 0:  # /proc counts 10 ms ticks: a short run may read 0
            row["ratio_cpu"] = round(ours["cpu_s_per_1000"] / peer["cpu_s_per_1000"], 2)
        if "busy_cpu_s_per_1000" in ours and peer.get("busy_cpu_s_per_1000"):
            row["ratio_busy_cpu"] = round(ours["busy_cpu_s_per_1000"] / peer["busy_cpu_s_per_1000"], 2)
    return row


# -- sustained (wrk) ---------------------------------------------------------------------------------

_WRK_LUA = """wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
local f = io.open(os.getenv("SMETRIC_BODY_FILE"), "rb"); wrk.body = f:read("*all"); f:close()
"""


def wrk(url: str, concurrency: int, duration_s: int, body_file: str, script: str) -> dict[str, Any]:
    env = {**os.environ, "SMETRIC_BODY_FILE": body_file}
    argv = ["wrk", "-t1", f"-c{concurrency}", f"-d{duration_s}s", "--latency", "-s", script, url]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout

    def ms(q: str) -> float:
        m = re.search(rf"\s{q}%\s+([\d.]+)(us|ms|s)\b", out)
        if m is None:
            raise RuntimeError(f"wrk output without the {q}th percentile:\n{out}")
        return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]

    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "concurrency": concurrency,
        "req_s": float(rate.group(1)) if rate else 0.0,
        "p50_ms": ms("50"),
        "p99_ms": ms("99"),
        "non_2xx": int(bad.group(1)) if bad else 0,
    }


async def sustained(duration_s: int, policy: str) -> dict[str, Any]:
    rng = random.Random(7)
    work = Path(tempfile.mkdtemp())
    body_file, script = work / "body.json", work / "post.lua"
    body_file.write_bytes(agent_body(rng, 1, 2, 128 * 1024))
    script.write_text(_WRK_LUA)
    out: dict[str, Any] = {"client": "wrk -t1", "body_bytes": 128 * 1024}
    async with AsyncExitStack() as stack:
        st = Stack()
        await st.start(stack, policy)
        await asyncio.sleep(1.0)
        for name in ("envoy+noop", "envoy+picker", "vllm-router"):
            if name not in st.urls:
                continue
            levels = []
            for c in (1, 2, 4, 8, 16, 32, 64):
                cpu0 = sum(cpu_s(p) for p in st.pids[name])
                picker0 = cpu_s(st.picker_pid)
                level = wrk(st.urls[name], c, duration_s, str(body_file), str(script))
                served = max(1.0, level["req_s"] * duration_s)
                level["cpu_ms_per_request"] = round(
                    (sum(cpu_s(p) for p in st.pids[name]) - cpu0) / served * 1e3, 3
                )
                if name == "envoy+picker":  # the picker process alone (the goal is per picker process)
                    level["picker_cpu_ms_per_request"] = round(
                        (cpu_s(st.picker_pid) - picker0) / served * 1e3, 3
                    )
                levels.append(level)
                if level["p99_ms"] > 2 * levels[0]["p99_ms"]:
                    break
            ok = [lv for lv in levels if lv["p99_ms"] <= 2 * levels[0]["p99_ms"]]
            out[name] = {"levels": levels, "max_req_s_before_p99_doubles": max(lv["req_s"] for lv in ok)}
    return out


# -- report ----------------------------------------------------------------------------------------


def spread(values: Sequence[float]) -> dict[str, float]:
    return {
        "min": round(min(values), 3),
        "median": round(statistics.median(values), 3),
        "max": round(max(values), 3),
    }


def aggregate(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for i, size in enumerate(SIZES):
        rows = [r["sizes"][i] for r in runs]
        agg: dict[str, Any] = {"body_bytes": size}
        for path in rows[0]:
            if not isinstance(rows[0][path], dict):
                continue
            for key in ("added_p50_ms", "added_p99_ms", "cpu_s_per_1000", "busy_cpu_s_per_1000"):
                if key in rows[0][path]:
                    agg[f"{path} {key}"] = spread([r[path][key] for r in rows])
        for key in ("ratio_added_p50", "ratio_added_p99", "ratio_cpu", "ratio_busy_cpu"):
            values = [r[key] for r in rows if r.get(key) is not None]
            if values:
                agg[key] = spread(values)
        out.append(agg)
    return out


def _cell(s: dict[str, float] | None) -> str:
    return "—" if s is None else f"{s['median']:.2f} ({s['min']:.2f}–{s['max']:.2f})"


def print_report(result: dict[str, Any]) -> None:
    print(f"\n{result['runs']} runs x {result['requests']} requests per size; median (min–max) over runs")
    print(
        "| body | path | added p50 ms | added p99 ms | CPU s / 1,000 req | busy CPU s / 1,000 req |\n"
        "|---|---|---|---|---|---|"
    )
    keys = ("added_p50_ms", "added_p99_ms", "cpu_s_per_1000", "busy_cpu_s_per_1000")
    for agg in result["aggregate"]:
        size = f"{agg['body_bytes'] // 1024} KiB"
        for path in ("envoy", "envoy+noop", "envoy+picker", "vllm-router"):
            if f"{path} added_p50_ms" in agg:
                print(
                    f"| {size} | {path} | " + " | ".join(_cell(agg.get(f"{path} {k}")) for k in keys) + " |"
                )
        if "ratio_added_p50" in agg or "ratio_cpu" in agg:
            ratios = ("ratio_added_p50", "ratio_added_p99", "ratio_cpu", "ratio_busy_cpu")
            print(
                f"| {size} | **ratio** envoy+picker / vllm-router | "
                + " | ".join(_cell(agg.get(k)) for k in ratios)
                + " |"
            )
    if "sustained" in result:
        s = result["sustained"]
        for name in ("envoy+noop", "envoy+picker", "vllm-router"):
            if name in s:
                lv = s[name]["levels"]
                print(
                    f"sustained 128 KiB {name}: {s[name]['max_req_s_before_p99_doubles']:.0f} req/s before p99 doubles; "
                    + ", ".join(
                        f"c{x['concurrency']} {x['req_s']:.0f}/s p99 {x['p99_ms']:.1f} ms cpu {x['cpu_ms_per_request']:.2f} ms"
                        + (
                            f" (picker {x['picker_cpu_ms_per_request']:.2f})"
                            if "picker_cpu_ms_per_request" in x
                            else ""
                        )
                        for x in lv
                    )
                )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="runs, each with fresh processes (default 5)")
    ap.add_argument("--requests", type=int, default=300, help="requests per size and path per run")
    ap.add_argument("--policy", default="", help="the picker's policy (default: the picker's default)")
    ap.add_argument("--sustained", action="store_true", help="also the closed-loop rate (needs wrk)")
    ap.add_argument("--sustained-duration", type=int, default=4, help="seconds per concurrency level")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--serve-noop", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_noop:
        from smetric.epp.main import event_loop_factory

        port, health_port, destination = args.serve_noop.split(",")
        with asyncio.Runner(loop_factory=event_loop_factory("auto")) as runner:
            runner.run(serve_noop(int(port), int(health_port), destination))
        return 0
    started = time.time()
    runs = []
    for i in range(args.runs):
        print(f"run {i + 1}/{args.runs} ...", flush=True)
        runs.append(asyncio.run(one_run(args.requests, args.policy)))
    result: dict[str, Any] = {
        "runs": args.runs,
        "requests": args.requests,
        "policy": args.policy or "default",
        "per_run": runs,
        "aggregate": aggregate(runs),
        "cpus": os.cpu_count(),
        "loadavg_at_start": os.getloadavg(),
    }
    if args.sustained:
        if shutil.which("wrk") is None:
            print("wrk is not installed: the sustained rows are skipped (apt-get install wrk)")
        else:
            result["sustained"] = asyncio.run(sustained(args.sustained_duration, args.policy))
    result["wall_s"] = round(time.time() - started, 1)
    print_report(result)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
