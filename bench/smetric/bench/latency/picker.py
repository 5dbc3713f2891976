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
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import grpc
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as pm
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

from smetric.bench.latency.harness import (
    SIZES,
    agent_body,
    chat_url,
    climb,
    envoy_options,
    p50_p99,
    rotate,
    sized_bodies,
    spawn_server,
    start_envoy,
    start_picker,
    summary_ms,
    table,
    timed_post,
    write_json,
)
from smetric.bench.latency.servers import make_picker
from smetric.bench.procs import stopped
from smetric.core.stopping import Interrupted, run_until_signalled
from smetric.core.views import RequestView
from smetric.epp.config import PolicySection
from smetric.epp.envoy import bootstrap, free_port
from smetric.epp.parse.body import parse_body

# -- workload ---------------------------------------------------------------------------------------


def decision_bodies(n: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return [agent_body(rng, i % 64, (i // 64) % 6, 32 * 1024) for i in range(n)]


# -- 1. decision latency ---------------------------------------------------------------------------


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
    for size in SIZES:
        bodies = sized_bodies(size, n)
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


async def run_decision_benches(quick: bool) -> list[dict[str, Any]]:
    bodies = decision_bodies(200 if quick else 1000)
    out = []
    for n in (8, 32, 128):
        policy = bench_policy(n, bodies)
        port = free_port()
        async with AsyncExitStack() as stack:
            spawn_server(stack, "static-picker", str(port), str(n))
            path = await bench_ext_proc(port, bodies)
        out.append({"endpoints": n, "policy": policy, "ext_proc": path})
    return out


# -- 2 + 3. through Envoy ------------------------------------------------------------------------------


async def bench_added(
    session: aiohttp.ClientSession, urls: dict[str, str], size: int, n: int
) -> dict[str, Any]:
    """Round-robin over the paths (``direct`` and picker variants) so all see the same machine state."""
    times = await rotate(session, urls, sized_bodies(size, n))
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
    return await climb(lambda c: closed_loop(session, url, bodies, c, duration_s))


async def run_envoy_benches(quick: bool) -> dict[str, Any]:
    ports = [free_port() for _ in range(8)]
    direct_port = free_port()
    async with AsyncExitStack() as stack:
        spawn_server(stack, "backends", ",".join(map(str, ports)))
        picker = await start_picker(stack, ports, "--response-path", "observer")
        inline = envoy_options(
            picker.grpc_port, direct_port=direct_port, direct_backend=f"127.0.0.1:{ports[0]}"
        )
        observer = envoy_options(picker.grpc_port, response_path="observer")
        buffered = envoy_options(picker.grpc_port, request_body_mode="BUFFERED")
        for opts in (inline, observer, buffered):
            await start_envoy(stack, bootstrap(opts))
        urls = {
            "direct": chat_url(direct_port),
            "full_duplex": chat_url(inline.listen_port),
            "observer": chat_url(observer.listen_port),
            "buffered": chat_url(buffered.listen_port),
        }
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as s:
            await asyncio.sleep(0.5)  # a few scrapes
            n = 60 if quick else 300
            added = [await bench_added(s, urls, size, n) for size in SIZES]
            duration_s = 2.0 if quick else 5.0
            sustained = await bench_sustained(s, urls["full_duplex"], duration_s)
            sustained_observer = await bench_sustained(s, urls["observer"], duration_s)
    return {
        "added_latency": added,
        "sustained_128k": sustained,
        "sustained_128k_observer": sustained_observer,
    }


def print_tables(results: dict[str, Any]) -> None:
    decision = [
        (r["endpoints"], *(f"{r[k][q]} ms" for k in ("policy", "ext_proc") for q in ("p50_ms", "p99_ms")))
        for r in results["decision"]
    ]
    print("\n" + table(("endpoints", "policy p50", "policy p99", "ext_proc p50", "ext_proc p99"), decision))
    parts = ("parse", "index_key", "pick_without_key")
    breakdown = [
        (f"{r['body_bytes'] // 1024} KiB", *(p50_p99(r[k]) for k in parts)) for r in results["breakdown"]
    ]
    print(
        "\n" + table(("body", "parse p50 / p99", "index key p50 / p99", "rest of pick p50 / p99"), breakdown)
    )
    paths = ("full_duplex", "observer", "buffered")
    added = [
        (
            f"{r['body_bytes'] // 1024} KiB",
            p50_p99(r["direct"]),
            *(
                cell
                for p in paths
                for cell in (p50_p99(r[p]), p50_p99(r, f"added_{p}_p50_ms", f"added_{p}_p99_ms"))
            ),
        )
        for r in results["envoy"]["added_latency"]
    ]
    header = ("body", "direct p50 / p99", *(c for p in paths for c in (f"{p} p50 / p99", "added p50 / p99")))
    print("\n" + table(header, added))
    for key in ("sustained_128k", "sustained_128k_observer"):
        levels = [
            (r["concurrency"], r["req_s"], f"{r['p50_ms']} ms", f"{r['p99_ms']} ms")
            for r in results["envoy"][key]["levels"]
        ]
        print(f"\n{key}\n" + table(("concurrency", "req/s", "p50", "p99"), levels))
        print(
            f"\nmax req/s (128 KiB) before p99 doubles: {results['envoy'][key]['max_req_s_before_p99_doubles']}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """:func:`run`; SIGTERM or SIGINT stops every process it started and exits 143 / 130."""
    try:
        return run(argv)
    except Interrupted as exc:
        return stopped("python -m smetric.bench.latency.picker", exc)


def run(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer requests (smoke run)")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--only", choices=("decision", "envoy"), help="run one part")
    ap.add_argument(
        "--compare-policies",
        help="comma-separated policies: only their in-process decision latency at 32/128 endpoints",
    )
    args = ap.parse_args(argv)
    if args.compare_policies:
        rows = compare_policies(
            [x.strip() for x in args.compare_policies.split(",") if x.strip()], args.quick
        )
        cells = [(r["endpoints"], r["policy"], f"{r['p50_ms']} ms", f"{r['p99_ms']} ms") for r in rows]
        print(table(("endpoints", "policy", "decision p50", "decision p99"), cells))
        write_json(args.out, rows)
        return 0
    results: dict[str, Any] = {"cpus": os.cpu_count(), "quick": args.quick}
    if args.only in (None, "decision"):
        results["decision"] = run_until_signalled(run_decision_benches(args.quick))
        results["breakdown"] = bench_breakdown(30 if args.quick else 100)
    if args.only in (None, "envoy"):
        results["envoy"] = run_until_signalled(run_envoy_benches(args.quick))
    write_json(args.out, results)
    if "decision" in results and "envoy" in results:
        print_tables(results)
    else:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
