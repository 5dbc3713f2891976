"""Upstream's metric series (GIE v1.0.0 pkg/epp/metrics/metrics.go names, and the v1.1.0+
``inference_objective_*`` renames) through the real servicer: a routed streaming request with
usage, a refused request, and the pool gauges from the health refresh; and the effect of two
upstream flags on the request path (--disable-endpoint-subset-filter, --health-checking)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import grpc
import orjson
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from smetric.epp.obs.health import HealthReporter
from smetric.epp.server.static import idle_metrics
from tests.support.epp_harness import (
    BASE_HEADERS,
    EPS,
    body_msgs,
    build,
    chat,
    exchange,
    headers_msg,
    set_headers,
)


def _hdrs(pairs: dict[str, str], eos: bool = False) -> ep.HttpHeaders:
    hm = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]
    )
    return ep.HttpHeaders(headers=hm, end_of_stream=eos)


def _samples(registry: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition text, parsed by prometheus_client's own parser."""
    out = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def test_a_routed_request_and_a_refusal_fill_both_upstream_families(serve: Any) -> None:
    servicer, _, _, metrics = build(models=("qwen",))
    stub = await serve(servicer)
    call = stub.Process()
    await call.write(headers_msg(BASE_HEADERS))
    for m in body_msgs(chat(model="qwen")):
        await call.write(m)
    await call.read()  # the routing decision
    assert (
        metrics.registry.get_sample_value("inference_model_running_requests", {"model_name": "qwen"}) == 1.0
    )
    await call.write(
        ep.ProcessingRequest(response_headers=_hdrs({":status": "200", "content-type": "text/event-stream"}))
    )
    await call.read()
    usage = {
        "choices": [],
        "usage": {
            "prompt_tokens": 120,
            "completion_tokens": 10,
            "prompt_tokens_details": {"cached_tokens": 64},
        },
    }
    chunk = b"data: " + orjson.dumps(usage) + b"\n\ndata: [DONE]\n\n"
    await call.write(ep.ProcessingRequest(response_body=ep.HttpBody(body=chunk, end_of_stream=True)))
    await call.read()
    await call.done_writing()
    while await call.read() != grpc.aio.EOF:
        pass
    # refused: a body that is not JSON (400), its model unknown
    call = stub.Process()
    await call.write(headers_msg({**BASE_HEADERS, "x-request-id": "r2"}))
    await call.write(body_msgs(b"not json")[0])
    await call.done_writing()
    async for _ in call:
        pass

    s = _samples(metrics.registry)
    labels = (("model_name", "qwen"), ("target_model_name", "qwen"))
    assert s[("inference_model_request_total", labels)] == 1.0
    assert (
        s[("inference_objective_request_total", (labels[0], ("priority", "0"), labels[1]))] == 1.0
    )  # v1.5.0
    for family in ("inference_model", "inference_objective"):
        assert s[(f"{family}_running_requests", (("model_name", "qwen"),))] == 0.0
        assert s[(f"{family}_input_tokens_count", labels)] == 1.0
        assert s[(f"{family}_input_tokens_sum", labels)] == 120.0
        assert s[(f"{family}_output_tokens_sum", labels)] == 10.0
        assert s[(f"{family}_request_duration_seconds_count", labels)] == 1.0
        assert s[(f"{family}_normalized_time_per_output_token_seconds_count", labels)] == 1.0
        assert s[(f"{family}_request_sizes_count", labels)] == 1.0
        assert (
            s[
                (
                    f"{family}_request_error_total",
                    (("error_code", "BadRequest"), ("model_name", ""), ("target_model_name", "")),
                )
            ]
            == 1.0
        )
    # v1.3.0+ series: the inference_objective family only
    assert s[("inference_objective_request_ttft_seconds_count", labels)] == 1.0
    assert s[("inference_objective_request_tpot_seconds_count", labels)] == 1.0
    assert s[("inference_objective_prompt_cached_tokens_sum", labels)] == 64.0
    assert ("inference_model_request_ttft_seconds_count", labels) not in s
    assert s[("inference_extension_scheduler_e2e_duration_seconds_count", ())] == 1.0
    assert any(name == "inference_extension_info" for name, _ in s)


async def test_pool_gauges_average_the_ready_endpoints() -> None:
    _, source, _, metrics = build(["10.0.0.1:8000", "10.0.0.2:8000"])
    source.set_metrics("10.0.0.1:8000", dataclasses.replace(idle_metrics(), waiting=4, kv_usage=0.5))
    source.set_metrics("10.0.0.2:8000", dataclasses.replace(idle_metrics(), waiting=0, kv_usage=0.1))
    metrics.upstream.pool_name = "qwen"
    await HealthReporter(source, metrics, lambda _a: False).refresh()
    get = metrics.registry.get_sample_value
    assert get("inference_pool_ready_pods", {"name": "qwen"}) == 2.0
    assert get("inference_pool_average_queue_size", {"name": "qwen"}) == 2.0
    assert abs((get("inference_pool_average_kv_cache_utilization", {"name": "qwen"}) or 0) - 0.3) < 1e-9


async def test_a_stream_that_ends_without_a_response_is_no_longer_running(serve: Any) -> None:
    """The running gauge comes down when the routing stream ends (client gone, gateway reset)."""
    servicer, _, _, metrics = build(models=("qwen",))
    stub = await serve(servicer)
    call = stub.Process()
    await call.write(headers_msg(BASE_HEADERS))
    for m in body_msgs(chat(model="qwen")):
        await call.write(m)
    await call.read()
    await call.done_writing()
    while await call.read() != grpc.aio.EOF:
        pass
    for _ in range(50):  # the servicer's finally-block runs after the stream closes
        if (
            metrics.registry.get_sample_value("inference_model_running_requests", {"model_name": "qwen"})
            == 0.0
        ):
            break
        await asyncio.sleep(0.02)
    assert (
        metrics.registry.get_sample_value("inference_model_running_requests", {"model_name": "qwen"}) == 0.0
    )
    assert metrics.registry.get_sample_value(
        "inference_model_request_duration_seconds_count", {"model_name": "qwen", "target_model_name": "qwen"}
    ) in (None, 0.0)


async def test_disable_endpoint_subset_filter_ignores_the_hint(serve: Any) -> None:
    """--disable-endpoint-subset-filter (upstream's meaning): an empty subset hint, a 503 with the
    filter, is routed over the whole pool without it."""
    from smetric.epp.server.servicer import ServicerSettings

    servicer, *_ = build()
    stub = await serve(servicer)
    out = await exchange(stub, [headers_msg(BASE_HEADERS, subset=[]), *body_msgs(chat())])
    assert out[-1].immediate_response.status.code == 503
    unfiltered, *_ = build(settings=ServicerSettings(subset_filter=False))
    stub = await serve(unfiltered)
    out = await exchange(stub, [headers_msg(BASE_HEADERS, subset=[]), *body_msgs(chat())])
    assert set_headers(out[0])["x-smetric-destination-primary"] in EPS


async def test_health_checking_serves_health_on_the_ext_proc_port() -> None:
    """--health-checking: grpc.health.v1 answers on the ext_proc port too (as upstream's runserver)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from smetric.epp.server.app import PickerServer

    servicer, source, _, metrics = build()
    for on, expected in ((False, grpc.StatusCode.UNIMPLEMENTED), (True, None)):
        health = HealthReporter(source, metrics, lambda _a: False)  # a stopped server drains its own
        server = PickerServer(
            servicer, health, host="127.0.0.1", grpc_port=0, health_port=0, health_on_grpc_port=on
        )
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
                stub = health_pb2_grpc.HealthStub(ch)
                try:
                    reply = await stub.Check(health_pb2.HealthCheckRequest(service="readiness"), timeout=2)
                    assert expected is None and reply.status == health_pb2.HealthCheckResponse.SERVING
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == expected
        finally:
            await server.stop(0)
