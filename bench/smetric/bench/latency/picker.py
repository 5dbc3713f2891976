"""Picker latency benchmark: decision latency, added latency through Envoy, sustained throughput.

    .venv/bin/python -m smetric.bench.latency.picker [--quick] [--out results.json]

1. Decision latency p50/p99 at 8, 32 and 128 endpoints:
   * ``policy``: :meth:`Picker.pick` in process (approximate prefix index lookup, snapshots, the
     SMetric policy, ledger) on already-parsed agentic multi-turn prompts;
   * ``ext_proc``: the full path over gRPC to a picker in another process (headers + body in
     64 KiB chunks as Envoy sends them -> deferred headers reply + echoed body), timed at the client.
2. Added latency through a real Envoy: the same request goes straight to one backend (listener
   without the picker) and through the picker three ways, each its own Envoy: ``full_duplex``
   (``FULL_DUPLEX_STREAMED`` request, response inline through the picker: what GIE gateways
   configure), ``observer`` (the same request path, response reported by an observability_mode
   filter: ``--response-path=observer``) and ``buffered`` (``BUFFERED`` request, response inline);
   requests rotate over the paths; 8 KB, 128 KB, 1 MB bodies. The picker is one real
   ``smetric-epp`` process (standalone discovery, /metrics scraping, approximate index) run with
   ``--response-path=observer``, which serves inline streams unchanged.
3. Sustained requests/s with 128 KB bodies through the ``full_duplex`` and ``observer`` paths:
   closed loop at rising concurrency until p99 exceeds twice the p99 at concurrency 1.

Every process (client, Envoy, picker, backends) shares this machine's cores: numbers are upper
bounds of what the picker adds, not isolated measurements.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import grpc
from aiohttp import web
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as pm
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc
from prometheus_client import CollectorRegistry

from smetric.bench.latency.harness import agent_body, spawn, summary_ms, timed_post
from smetric.core.views import RequestView
from smetric.epp.config import PickerConfig, PolicySection, policy_params
from smetric.epp.envoy import EnvoyOptions, EnvoyProcess, bootstrap, free_port
from smetric.epp.index.approximate import ApproximateIndex
from smetric.epp.obs.health import wait_serving
from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.parse.body import parse_body
from smetric.epp.server.app import PickerServer, build_picker
from smetric.epp.server.decide import Picker
from smetric.epp.server.servicer import ExtProcServicer
from smetric.epp.server.static import StaticEndpointSource

PY = sys.executable


# -- workload ---------------------------------------------------------------------------------------


def decision_bodies(n: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return [agent_body(rng, i % 64, (i // 64) % 6, 32 * 1024) for i in range(n)]


# -- 1. decision latency ---------------------------------------------------------------------------


def make_picker(n_endpoints: int, policy: PolicySection | None = None) -> Picker:
    addrs = [f"10.0.{i // 250}.{i % 250 + 1}:8000" for i in range(n_endpoints)]
    cfg = PickerConfig() if policy is None else PickerConfig(policy=policy)
    return build_picker(cfg, policy_params(cfg), StaticEndpointSource(addrs), ApproximateIndex())


def bench_policy(
    n_endpoints: int, bodies: list[bytes], policy: PolicySection | None = None
) -> dict[str, float]:
    picker = make_picker(n_endpoints, policy)
    parsed = [parse_body(b, "/v1/chat/completions") for b in bodies]
    times: list[float] = []
    for i, p in enumerate(parsed):
        view = RequestView(f"r{i}", p.prompt_tokens, p.turn, p.est_hit_tokens)
        t0 = time.perf_counter()
        picker.pick(view, p.prompt_text)
        times.append(time.perf_counter() - t0)
        picker.ledger.remove(f"r{i}")  # first token came back
    return summary_ms(times[len(times) // 10 :])  # drop warm-up


def compare_policies(names: Sequence[str], quick: bool, reps: int = 3) -> list[dict[str, Any]]:
    """In-process decision latency of several policies at 32 and 128 endpoints, interleaved
    request by request (each body is decided by every policy's own picker in turn, the order
    rotating), so a loaded box slows them alike; the median over ``reps`` of each p50/p99.
    Every policy runs with ``globalFetchSPerToken`` set (7.9e-6 s/token: 96 KiB per token at
    100 Gb/s), so the global-tier parts of the policies are on the measured path."""
    bodies = decision_bodies(200 if quick else 1000)
    parsed = [parse_body(b, "/v1/chat/completions") for b in bodies]
    out = []
    for n in (32, 128):
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in names}
        for _ in range(reps):
            pickers = {
                name: make_picker(n, PolicySection(name=name, parameters={"globalFetchSPerToken": 7.9e-6}))
                for name in names
            }
            times: dict[str, list[float]] = {name: [] for name in names}
            for i, p in enumerate(parsed):
                view = RequestView(f"r{i}", p.prompt_tokens, p.turn, p.est_hit_tokens)
                for k in range(len(names)):
                    name = names[(i + k) % len(names)]
                    picker = pickers[name]
                    t0 = time.perf_counter()
                    picker.pick(view, p.prompt_text)
                    times[name].append(time.perf_counter() - t0)
                    picker.ledger.remove(f"r{i}")
            for name in names:
                samples[name].append(summary_ms(times[name][len(parsed) // 10 :]))
        for name in names:
            row: dict[str, Any] = {"endpoints": n, "policy": name}
            for key in ("p50_ms", "p99_ms"):
                row[key] = statistics.median(s[key] for s in samples[name])
            out.append(row)
    return out


def bench_breakdown(n: int) -> list[dict[str, Any]]:
    """Where one decision's time goes, by body size: JSON parse, prefix-index key (hashing the
    prompt), and the rest of the pick (hits lookup, snapshots, policy, ledger) at 8 endpoints."""
    out = []
    for size in (8 * 1024, 128 * 1024, 1024 * 1024):
        rng = random.Random(size)
        bodies = [agent_body(rng, i % 32, i % 4, size) for i in range(n)]
        picker = make_picker(8)
        parse_s, key_s, rest_s = [], [], []
        for i, body in enumerate(bodies):
            t0 = time.perf_counter()
            p = parse_body(body, "/v1/chat/completions")
            t1 = time.perf_counter()
            picker.index.key(p.prompt_text)
            t2 = time.perf_counter()
            picker.pick(RequestView(f"r{i}", p.prompt_tokens, p.turn, p.est_hit_tokens), p.prompt_text)
            t3 = time.perf_counter()
            picker.ledger.remove(f"r{i}")
            parse_s.append(t1 - t0)
            key_s.append(t2 - t1)
            rest_s.append(max(0.0, (t3 - t2) - (t2 - t1)))  # pick() computes the key once more
        skip = n // 10
        out.append(
            {
                "body_bytes": size,
                "parse": summary_ms(parse_s[skip:]),
                "index_key": summary_ms(key_s[skip:]),
                "pick_without_key": summary_ms(rest_s[skip:]),
            }
        )
    return out


def _headers_msg(size: int, rid: str) -> ep.ProcessingRequest:
    hs = {
        ":method": "POST",
        ":path": "/v1/chat/completions",
        "x-request-id": rid,
        "content-length": str(size),
    }
    hm = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in hs.items()]
    )
    return ep.ProcessingRequest(
        request_headers=ep.HttpHeaders(headers=hm),
        protocol_config=ep.ProtocolConfiguration(
            request_body_mode=pm.ProcessingMode.FULL_DUPLEX_STREAMED,
            response_body_mode=pm.ProcessingMode.FULL_DUPLEX_STREAMED,
        ),
    )


async def _ext_proc_once(stub: ep_grpc.ExternalProcessorStub, body: bytes, rid: str) -> float:
    call = stub.Process()
    t0 = time.perf_counter()
    await call.write(_headers_msg(len(body), rid))
    chunk = 65_536
    for i in range(0, len(body), chunk):
        part = body[i : i + chunk]
        await call.write(
            ep.ProcessingRequest(request_body=ep.HttpBody(body=part, end_of_stream=i + chunk >= len(body)))
        )
    reply = await call.read()
    elapsed = time.perf_counter() - t0
    if not reply.HasField("request_headers"):
        raise RuntimeError(f"unexpected reply {reply}")
    await call.done_writing()
    while await call.read() != grpc.aio.EOF:
        pass
    return elapsed


async def bench_ext_proc(port: int, bodies: list[bytes]) -> dict[str, float]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = ep_grpc.ExternalProcessorStub(ch)
        times = [await _ext_proc_once(stub, b, f"r{i}") for i, b in enumerate(bodies)]
    return summary_ms(times[len(times) // 10 :])


async def serve_static_picker(port: int, n_endpoints: int) -> None:
    """Subprocess mode: a picker with N static endpoints (no backends needed for decisions)."""
    picker = make_picker(n_endpoints)
    server = PickerServer(
        ExtProcServicer(picker, PickerMetrics(CollectorRegistry())),
        None,
        host="127.0.0.1",
        grpc_port=port,
        health_port=None,
    )
    await server.start()
    print("ready", flush=True)
    await asyncio.Event().wait()


# -- backends -----------------------------------------------------------------------------------------


async def serve_backends(ports: list[int]) -> None:
    """Subprocess mode: OpenAI-shaped echo servers that also serve vLLM /metrics (idle engine)."""
    metrics = (
        'vllm:num_requests_running{engine="0",model_name="m"} 0\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 0\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.05\n'
        'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="65536"} 1.0\n'
    )

    async def chat(request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response(
            {"bytes": len(body), "usage": {"prompt_tokens": len(body) // 4, "completion_tokens": 1}}
        )

    async def prom(request: web.Request) -> web.Response:
        return web.Response(text=metrics, content_type="text/plain")

    for port in ports:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_get("/metrics", prom)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


# -- 2 + 3. through Envoy ------------------------------------------------------------------------------


async def bench_added(
    session: aiohttp.ClientSession, urls: dict[str, str], size: int, n: int
) -> dict[str, Any]:
    """Round-robin over the paths (``direct`` and picker variants) so all see the same machine state."""
    rng = random.Random(size)
    bodies = [agent_body(rng, i % 32, i % 4, size) for i in range(n)]
    times: dict[str, list[float]] = {name: [] for name in urls}
    for b in bodies:
        for name, url in urls.items():
            times[name].append(await timed_post(session, url, b))
    skip = n // 10
    out: dict[str, Any] = {"body_bytes": size}
    for name, xs in times.items():
        out[name] = summary_ms(xs[skip:])
    d = out["direct"]
    for name in urls:
        if name != "direct":
            out[f"added_{name}_p50_ms"] = round(out[name]["p50_ms"] - d["p50_ms"], 3)
            out[f"added_{name}_p99_ms"] = round(out[name]["p99_ms"] - d["p99_ms"], 3)
    return out


async def closed_loop(
    session: aiohttp.ClientSession, url: str, bodies: list[bytes], concurrency: int, duration_s: float
) -> dict[str, Any]:
    times: list[float] = []
    stop_at = time.perf_counter() + duration_s
    counter = iter(range(1 << 30))

    async def worker() -> None:
        while time.perf_counter() < stop_at:
            times.append(await timed_post(session, url, bodies[next(counter) % len(bodies)]))

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    return {"concurrency": concurrency, "req_s": round(len(times) / wall, 1), **summary_ms(times)}


async def bench_sustained(session: aiohttp.ClientSession, url: str, duration_s: float) -> dict[str, Any]:
    rng = random.Random(7)
    bodies = [agent_body(rng, i % 64, i % 4, 128 * 1024) for i in range(64)]
    levels: list[dict[str, Any]] = []
    base_p99 = None
    for c in (1, 2, 4, 8, 16, 32, 64):
        r = await closed_loop(session, url, bodies, c, duration_s)
        levels.append(r)
        if base_p99 is None:
            base_p99 = r["p99_ms"]
        elif r["p99_ms"] > 2 * base_p99:
            break
    ok = [r for r in levels if r["p99_ms"] <= 2 * levels[0]["p99_ms"]]
    return {"levels": levels, "max_req_s_before_p99_doubles": max(r["req_s"] for r in ok)}


async def run_envoy_benches(quick: bool) -> dict[str, Any]:
    n_backends = 8
    ports = [free_port() for _ in range(n_backends)]
    backends = spawn([PY, __file__, "--serve-backends", ",".join(map(str, ports))])
    grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
    picker = spawn(
        [
            PY, "-m", "smetric.epp.main",
            "--endpoints", ",".join(f"127.0.0.1:{p}" for p in ports),
            "--grpc-port", str(grpc_port), "--grpc-health-port", str(health_port),
            "--metrics-port", str(metrics_port), "--log-level", "warning",
            "--response-path", "observer", "--secure-serving=false",
        ],
        wait_ready=False,
    )  # fmt: skip
    try:
        await wait_serving(f"127.0.0.1:{health_port}", 30.0)
        opts = EnvoyOptions(
            listen_port=free_port(),
            admin_port=free_port(),
            picker_port=grpc_port,
            direct_port=free_port(),
            direct_backend=f"127.0.0.1:{ports[0]}",
        )
        buffered = EnvoyOptions(
            listen_port=free_port(),
            admin_port=free_port(),
            picker_port=grpc_port,
            request_body_mode="BUFFERED",
        )
        observer = EnvoyOptions(
            listen_port=free_port(), admin_port=free_port(), picker_port=grpc_port, response_path="observer"
        )
        async with (
            EnvoyProcess(bootstrap(opts)),
            EnvoyProcess(bootstrap(observer)),
            EnvoyProcess(bootstrap(buffered)),
        ):
            urls = {
                "direct": f"http://127.0.0.1:{opts.direct_port}/v1/chat/completions",
                "full_duplex": f"http://127.0.0.1:{opts.listen_port}/v1/chat/completions",
                "observer": f"http://127.0.0.1:{observer.listen_port}/v1/chat/completions",
                "buffered": f"http://127.0.0.1:{buffered.listen_port}/v1/chat/completions",
            }
            timeout = aiohttp.ClientTimeout(total=60)
            async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as s:
                await asyncio.sleep(0.5)  # a few scrapes
                n = 60 if quick else 300
                added = [await bench_added(s, urls, size, n) for size in (8 * 1024, 128 * 1024, 1024 * 1024)]
                duration_s = 2.0 if quick else 5.0
                sustained = await bench_sustained(s, urls["full_duplex"], duration_s)
                sustained_observer = await bench_sustained(s, urls["observer"], duration_s)
    finally:
        picker.stop()
        backends.stop()
    return {
        "added_latency": added,
        "sustained_128k": sustained,
        "sustained_128k_observer": sustained_observer,
    }


async def run_decision_benches(quick: bool) -> list[dict[str, Any]]:
    bodies = decision_bodies(200 if quick else 1000)
    out = []
    for n in (8, 32, 128):
        policy = bench_policy(n, bodies)
        port = free_port()
        child = spawn([PY, __file__, "--serve-static-picker", str(port), "--endpoints-count", str(n)])
        try:
            path = await bench_ext_proc(port, bodies)
        finally:
            child.stop()
        out.append({"endpoints": n, "policy": policy, "ext_proc": path})
    return out


def print_tables(results: dict[str, Any]) -> None:
    print("\n| endpoints | policy p50 | policy p99 | ext_proc p50 | ext_proc p99 |\n|---|---|---|---|---|")
    for r in results["decision"]:
        p, e = r["policy"], r["ext_proc"]
        print(
            f"| {r['endpoints']} | {p['p50_ms']} ms | {p['p99_ms']} ms | {e['p50_ms']} ms | {e['p99_ms']} ms |"
        )
    print("\n| body | parse p50 / p99 | index key p50 / p99 | rest of pick p50 / p99 |\n|---|---|---|---|")
    for r in results["breakdown"]:
        cells = " | ".join(
            f"{r[k]['p50_ms']} / {r[k]['p99_ms']} ms" for k in ("parse", "index_key", "pick_without_key")
        )
        print(f"| {r['body_bytes'] // 1024} KiB | {cells} |")
    paths = ("full_duplex", "observer", "buffered")
    print(
        "\n| body | direct p50 / p99 | "
        + " | ".join(f"{p} p50 / p99 | added p50 / p99" for p in paths)
        + "|\n|---|---|"
        + "---|---|" * len(paths)
    )
    for r in results["envoy"]["added_latency"]:
        d = r["direct"]
        cells = " | ".join(
            f"{r[p]['p50_ms']} / {r[p]['p99_ms']} ms | {r[f'added_{p}_p50_ms']} / {r[f'added_{p}_p99_ms']} ms"
            for p in paths
        )
        print(f"| {r['body_bytes'] // 1024} KiB | {d['p50_ms']} / {d['p99_ms']} ms | {cells} |")
    for key in ("sustained_128k", "sustained_128k_observer"):
        print(f"\n{key}\n| concurrency | req/s | p50 | p99 |\n|---|---|---|---|")
        for r in results["envoy"][key]["levels"]:
            print(f"| {r['concurrency']} | {r['req_s']} | {r['p50_ms']} ms | {r['p99_ms']} ms |")
        print(
            f"\nmax req/s (128 KiB) before p99 doubles: {results['envoy'][key]['max_req_s_before_p99_doubles']}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer requests (smoke run)")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--only", choices=("decision", "envoy"), help="run one part")
    ap.add_argument("--serve-backends", help=argparse.SUPPRESS)
    ap.add_argument("--serve-static-picker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--endpoints-count", type=int, default=8, help=argparse.SUPPRESS)
    ap.add_argument(
        "--compare-policies",
        help="comma-separated policies: only their in-process decision latency at 32/128 endpoints",
    )
    args = ap.parse_args(argv)
    if args.compare_policies:
        rows = compare_policies(
            [x.strip() for x in args.compare_policies.split(",") if x.strip()], args.quick
        )
        print("| endpoints | policy | decision p50 | decision p99 |\n|---|---|---|---|")
        for r in rows:
            print(f"| {r['endpoints']} | {r['policy']} | {r['p50_ms']} ms | {r['p99_ms']} ms |")
        if args.out:
            args.out.write_text(json.dumps(rows, indent=2))
        return 0
    if args.serve_backends:
        asyncio.run(serve_backends([int(p) for p in args.serve_backends.split(",")]))
        return 0
    if args.serve_static_picker:
        asyncio.run(serve_static_picker(args.serve_static_picker, args.endpoints_count))
        return 0
    results: dict[str, Any] = {"cpus": os.cpu_count(), "quick": args.quick}
    if args.only in (None, "decision"):
        results["decision"] = asyncio.run(run_decision_benches(args.quick))
        results["breakdown"] = bench_breakdown(30 if args.quick else 100)
    if args.only in (None, "envoy"):
        results["envoy"] = asyncio.run(run_envoy_benches(args.quick))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    if "decision" in results and "envoy" in results:
        print_tables(results)
    else:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
