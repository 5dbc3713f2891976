"""The processes the latency benchmarks start, each ``python -m smetric.bench.latency.servers KIND``:

* ``backends PORT,...``: OpenAI-shaped echo servers (aiohttp) that also serve an idle vLLM
  ``/metrics`` page (:mod:`.picker`);
* ``static-picker PORT N``: a picker with N static endpoints and no backends, for decisions only
  (:mod:`.picker`);
* ``noop PORT,HEALTH_PORT,DESTINATION``: an ext_proc server that does nothing but route to one
  backend and echo the bodies (no parsing, no index, no policy, no scrapes): the floor of any
  Python picker (:mod:`.side_by_side`).

:func:`canned_backends` is the Envoy bootstrap of :mod:`.side_by_side`'s backends and
:func:`make_picker` the in-process picker of :mod:`.picker`.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from smetric.epp.config import PickerConfig, PolicySection, policy_params
from smetric.epp.index.approximate import ApproximateIndex
from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.server.app import PickerServer, build_picker
from smetric.epp.server.decide import Picker
from smetric.epp.server.servicer import ExtProcServicer
from smetric.epp.server.static import StaticEndpointSource

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


def make_picker(n_endpoints: int, policy: PolicySection | None = None) -> Picker:
    """An in-process picker over ``n_endpoints`` static addresses (approximate index)."""
    addrs = [f"10.0.{i // 250}.{i % 250 + 1}:8000" for i in range(n_endpoints)]
    cfg = PickerConfig() if policy is None else PickerConfig(policy=policy)
    return build_picker(cfg, policy_params(cfg), StaticEndpointSource(addrs), ApproximateIndex())


def canned_backends(ports: Sequence[int], admin_port: int) -> dict[str, Any]:
    """One Envoy, one listener per backend port, direct responses only (no upstream):
    ``/v1/chat/completions`` answers :data:`ANSWER`, ``/metrics`` :data:`IDLE_VLLM_PAGE`,
    ``/health`` 200."""

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


async def serve_backends(ports: list[int]) -> None:
    """OpenAI-shaped echo servers that also serve vLLM /metrics (idle engine)."""

    async def chat(request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response(
            {"bytes": len(body), "usage": {"prompt_tokens": len(body) // 4, "completion_tokens": 1}}
        )

    async def prom(request: web.Request) -> web.Response:
        return web.Response(text=IDLE_VLLM_PAGE, content_type="text/plain")

    for port in ports:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_get("/metrics", prom)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


async def serve_static_picker(port: int, n_endpoints: int) -> None:
    """A picker with N static endpoints (no backends needed for decisions)."""
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


async def serve_noop(port: int, health_port: int, destination: str) -> None:
    """The no-op ext_proc server (fixed destination, bodies echoed, nothing else)."""
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


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="kind", required=True)
    sub.add_parser("backends").add_argument("ports", help="comma-separated ports")
    static = sub.add_parser("static-picker")
    static.add_argument("port", type=int)
    static.add_argument("endpoints", type=int)
    sub.add_parser("noop").add_argument("where", help="PORT,HEALTH_PORT,DESTINATION")
    args = ap.parse_args(argv)
    if args.kind == "backends":
        asyncio.run(serve_backends([int(p) for p in args.ports.split(",")]))
    elif args.kind == "static-picker":
        asyncio.run(serve_static_picker(args.port, args.endpoints))
    else:
        from smetric.epp.main import event_loop_factory

        port, health_port, destination = args.where.split(",")
        with asyncio.Runner(loop_factory=event_loop_factory("auto")) as runner:
            runner.run(serve_noop(int(port), int(health_port), destination))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
