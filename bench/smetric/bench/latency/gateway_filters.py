"""A/B of the gateway's hardening Lua filters (header scrub + path allow-list, destination guard):
the same picker process and backend behind two Envoys, one with them and one without; 128 KiB
requests alternate between the two; latencies are paired by position.

    python -m smetric.bench.latency.gateway_filters [N]        # N rounds (default 400; the first 20 are warm-up)
    python -m smetric.bench.latency.gateway_filters N retries  # ORIGINAL_DST with retries (composite cluster
                                                               # + fallback-header filter) against retries=0
"""

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from smetric.bench.procs import stop_child, stopped
from smetric.core.stopping import Interrupted, run_until_signalled
from smetric.epp.envoy import EnvoyOptions, bootstrap, envoy_binary
from smetric.epp.envoy.process import free_port
from smetric.epp.server.guard import INFERENCE_PATHS

STOP_GRACE_S = 10.0  # each child's SIGTERM before SIGKILL

BACKEND = r"""
import sys
from aiohttp import web
async def chat(r):
    await r.read(); return web.json_response({"ok": 1})
async def metrics(r):
    return web.Response(text='vllm:num_requests_running{engine="0"} 0\nvllm:num_requests_waiting{engine="0"} 0\nvllm:kv_cache_usage_perc{engine="0"} 0\nvllm:cache_config_info{block_size="16",num_gpu_blocks="4096",engine="0"} 1\n')
app = web.Application(client_max_size=1<<24); app.router.add_post("/v1/chat/completions", chat); app.router.add_get("/metrics", metrics)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


async def wait(url: str) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(200):
            try:
                async with s.get(url) as r:
                    if r.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)


async def main() -> None:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        await measure(procs)
    finally:  # also on SIGTERM / SIGINT (run_until_signalled cancels this task)
        for p in procs:
            stop_child(p, STOP_GRACE_S)


async def measure(procs: list[subprocess.Popen[bytes]]) -> None:
    """Start the backend, the picker and both Envoys (appended to ``procs`` as they start), then the
    A/B rounds and their report."""
    retries_ab = len(sys.argv) > 2 and sys.argv[2] == "retries"
    bport, gp, hp, mp = free_port(), free_port(), free_port(), free_port()
    procs.append(subprocess.Popen([sys.executable, "-c", BACKEND, str(bport)]))
    procs.append(
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "smetric.core.cli",
                "epp",
                f"--endpoints=127.0.0.1:{bport}",
                f"--grpc-port={gp}",
                f"--grpc-health-port={hp}",
                f"--metrics-port={mp}",
                "--secure-serving=false",
                "--log-level=warning",
            ]
        )
    )
    await wait(f"http://127.0.0.1:{bport}/metrics")
    await wait(f"http://127.0.0.1:{mp}/metrics")
    await asyncio.sleep(1)
    urls = {}
    for name in ("new", "old"):
        o = EnvoyOptions(
            listen_port=free_port(),
            admin_port=free_port(),
            picker_port=gp,
            allowed_paths=() if name == "old" and not retries_ab else INFERENCE_PATHS,
            retries=0 if name == "old" and retries_ab else 2,
        )
        cfg = bootstrap(o)
        if name == "old" and not retries_ab:  # without the hardening Lua filters
            hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
            hcm["http_filters"] = [f for f in hcm["http_filters"] if not f["name"].startswith("smetric.")]
        path = Path(tempfile.gettempdir()) / f"gateway-ab-{name}-{os.getpid()}.json"
        path.write_text(json.dumps(cfg))
        procs.append(
            subprocess.Popen(
                [
                    str(envoy_binary()),
                    "-c",
                    str(path),
                    "--disable-hot-restart",
                    "--log-level",
                    "error",
                    "--concurrency",
                    "1",
                ]
            )
        )
        await wait(f"http://127.0.0.1:{o.admin_port}/ready")
        urls[name] = f"http://127.0.0.1:{o.listen_port}/v1/chat/completions"
    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "x" * (128 * 1024 - 60)}]}
    ).encode()
    lat: dict[str, list[float]] = {"new": [], "old": []}
    async with aiohttp.ClientSession() as s:
        for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 400):
            for name in ("new", "old") if i % 2 else ("old", "new"):
                t = time.perf_counter()
                async with s.post(urls[name], data=body, headers={"content-type": "application/json"}) as r:
                    await r.read()
                    assert r.status == 200, r.status
                if i >= 20:
                    lat[name].append((time.perf_counter() - t) * 1000)
    for name, v in lat.items():
        v.sort()
        print(
            name,
            "n",
            len(v),
            f"p50 {v[len(v) // 2]:.2f} p90 {v[int(len(v) * 0.9)]:.2f} p99 {v[int(len(v) * 0.99)]:.2f} ms",
        )
    d = sorted(a - b for a, b in zip(lat["new"], lat["old"], strict=True))
    print(f"paired new-old: median {d[len(d) // 2]:.3f} ms")


if __name__ == "__main__":
    try:
        run_until_signalled(main())
    except Interrupted as exc:
        sys.exit(stopped("python -m smetric.bench.latency.gateway_filters", exc))
