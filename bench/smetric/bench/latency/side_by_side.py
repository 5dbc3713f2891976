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
import tempfile
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp

from smetric.bench.latency.harness import (
    PY,
    SIZES,
    START_S,
    agent_body,
    chat_url,
    climb,
    envoy_options,
    rotate,
    sized_bodies,
    spawn,
    spawn_server,
    start_envoy,
    start_picker,
    summary_ms,
    table,
    timed_post,
    write_json,
)
from smetric.bench.latency.servers import canned_backends
from smetric.bench.procs import stopped, wait_http_ok
from smetric.core.stopping import Interrupted, run_until_signalled
from smetric.epp.envoy import bootstrap, free_port
from smetric.epp.obs.health import wait_serving

N_BACKENDS = 8


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
        await start_envoy(stack, canned_backends(ports, free_port()), concurrency=1)
        self.urls["backend"] = chat_url(ports[0])
        # Envoy + picker, response inline
        flags: list[str] = []
        if policy:
            cfg = Path(tempfile.mkdtemp()) / "picker.yaml"
            cfg.write_text(json.dumps({"policy": {"name": policy}}))
            flags = ["--config", str(cfg)]
        picker = await start_picker(stack, ports, *flags)
        inline = envoy_options(picker.grpc_port)
        envoy_pid = await start_envoy(stack, bootstrap(inline))
        self.urls["envoy+picker"] = chat_url(inline.listen_port)
        self.pids["envoy+picker"] = [envoy_pid, picker.pid]
        self.picker_pid = picker.pid
        # Envoy alone (reference)
        direct_port = free_port()
        direct = envoy_options(
            picker.grpc_port, direct_port=direct_port, direct_backend=f"127.0.0.1:{ports[0]}"
        )
        await start_envoy(stack, bootstrap(direct))
        self.urls["envoy"] = chat_url(direct_port)
        # Envoy + a no-op ext_proc server (the grpc.aio + Envoy floor)
        noop_port, noop_health = free_port(), free_port()
        where = f"{noop_port},{noop_health},127.0.0.1:{ports[1]}"
        noop = spawn_server(stack, "noop", where, wait_ready=False)
        await wait_serving(f"127.0.0.1:{noop_health}", START_S)
        floor = envoy_options(noop_port)
        noop_envoy_pid = await start_envoy(stack, bootstrap(floor))
        self.urls["envoy+noop"] = chat_url(floor.listen_port)
        self.pids["envoy+noop"] = [noop_envoy_pid, noop.proc.pid]
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
        self.urls["vllm-router"] = chat_url(port)
        self.pids["vllm-router"] = [router.proc.pid]


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
                bodies = sized_bodies(size, n)
                for url in st.urls.values():  # warm every connection
                    await warm_post(s, url, bodies[0])
                cpu0 = {k: sum(cpu_s(p) for p in pids) for k, pids in st.pids.items()}
                t0 = time.monotonic()
                times = await rotate(s, st.urls, bodies)
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

            async def level(c: int, name: str = name) -> dict[str, Any]:
                cpu0 = sum(cpu_s(p) for p in st.pids[name])
                picker0 = cpu_s(st.picker_pid)
                lv = wrk(st.urls[name], c, duration_s, str(body_file), str(script))
                served = max(1.0, lv["req_s"] * duration_s)
                lv["cpu_ms_per_request"] = round(
                    (sum(cpu_s(p) for p in st.pids[name]) - cpu0) / served * 1e3, 3
                )
                if name == "envoy+picker":  # the picker process alone (the goal is per picker process)
                    lv["picker_cpu_ms_per_request"] = round(
                        (cpu_s(st.picker_pid) - picker0) / served * 1e3, 3
                    )
                return lv

            out[name] = await climb(level)
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


def _level(x: dict[str, Any]) -> str:
    picker = f" (picker {x['picker_cpu_ms_per_request']:.2f})" if "picker_cpu_ms_per_request" in x else ""
    return f"c{x['concurrency']} {x['req_s']:.0f}/s p99 {x['p99_ms']:.1f} ms cpu {x['cpu_ms_per_request']:.2f} ms{picker}"


def print_report(result: dict[str, Any]) -> None:
    print(f"\n{result['runs']} runs x {result['requests']} requests per size; median (min–max) over runs")
    keys = ("added_p50_ms", "added_p99_ms", "cpu_s_per_1000", "busy_cpu_s_per_1000")
    ratios = ("ratio_added_p50", "ratio_added_p99", "ratio_cpu", "ratio_busy_cpu")
    rows: list[tuple[str, ...]] = []
    for agg in result["aggregate"]:
        size = f"{agg['body_bytes'] // 1024} KiB"
        for path in ("envoy", "envoy+noop", "envoy+picker", "vllm-router"):
            if f"{path} added_p50_ms" in agg:
                rows.append((size, path, *(_cell(agg.get(f"{path} {k}")) for k in keys)))
        if "ratio_added_p50" in agg or "ratio_cpu" in agg:
            rows.append((size, "**ratio** envoy+picker / vllm-router", *(_cell(agg.get(k)) for k in ratios)))
    header = ("body", "path", "added p50 ms", "added p99 ms", "CPU s / 1,000 req", "busy CPU s / 1,000 req")
    print(table(header, rows))
    s = result.get("sustained", {})
    for name in ("envoy+noop", "envoy+picker", "vllm-router"):
        if name in s:
            print(
                f"sustained 128 KiB {name}: {s[name]['max_req_s_before_p99_doubles']:.0f} req/s before p99 "
                "doubles; " + ", ".join(_level(x) for x in s[name]["levels"])
            )


def main(argv: Sequence[str] | None = None) -> int:
    """:func:`run`; SIGTERM or SIGINT stops every process it started and exits 143 / 130."""
    try:
        return run(argv)
    except Interrupted as exc:
        return stopped("python -m smetric.bench.latency.side_by_side", exc)


def run(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="runs, each with fresh processes (default 5)")
    ap.add_argument("--requests", type=int, default=300, help="requests per size and path per run")
    ap.add_argument("--policy", default="", help="the picker's policy (default: the picker's default)")
    ap.add_argument("--sustained", action="store_true", help="also the closed-loop rate (needs wrk)")
    ap.add_argument("--sustained-duration", type=int, default=4, help="seconds per concurrency level")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    args = ap.parse_args(argv)
    started = time.time()
    runs = []
    for i in range(args.runs):
        print(f"run {i + 1}/{args.runs} ...", flush=True)
        runs.append(run_until_signalled(one_run(args.requests, args.policy)))
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
            result["sustained"] = run_until_signalled(sustained(args.sustained_duration, args.policy))
    result["wall_s"] = round(time.time() - started, 1)
    print_report(result)
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
