"""Metric-name parity with the upstream pickers (llm-d-router v0.10.0 ``llm_d_epp_*``, GIE v1.5.0).

The picker's registry is scraped after real ext_proc traffic through the servicer (a streamed and
a buffered answer with usage, a model server's 500, a refusal, a failed scheduling attempt, the
pool refresh) and parsed with ``prometheus_client.parser``: every name
:mod:`smetric.epp.obs.parity` claims is there with upstream's type and label names, and the values
mean what upstream's do. The claims, the registry and docs/picker.md's tables agree.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import grpc
import orjson
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from smetric.epp.contracts import EndpointInfo
from smetric.epp.obs.health import HealthReporter
from smetric.epp.obs.llmd_metrics import FAIRNESS_ID
from smetric.epp.obs.parity import GIE_CLAIMS, GIE_NOT_EXPORTED, LLMD_CLAIMS, LLMD_NOT_EXPORTED, Claim
from smetric.epp.server.static import idle_metrics
from tests.support.epp_harness import BASE_HEADERS, body_msgs, build, chat, headers_msg

DOCS = Path(__file__).resolve().parents[3] / "docs" / "picker.md"
PODS = (
    EndpointInfo("10.0.0.1:8000", pod_name="qwen-0"),
    EndpointInfo("10.0.0.2:8000", pod_name="qwen-1"),
)


# the failed scheduling attempt's series: no endpoint was chosen
FAILED_ATTEMPT = {
    "status": "failure",
    "target_model_name": "qwen",
    "endpoint_name": "",
    "namespace": "",
    "port": "",
}


def _hdrs(pairs: dict[str, str], eos: bool = False) -> ep.HttpHeaders:
    hm = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]
    )
    return ep.HttpHeaders(headers=hm, end_of_stream=eos)


def _body(chunk: bytes, eos: bool) -> ep.ProcessingRequest:
    return ep.ProcessingRequest(response_body=ep.HttpBody(body=chunk, end_of_stream=eos))


async def _request(
    stub: Any,
    rid: str,
    body: bytes,
    status: str = "200",
    chunks: tuple[bytes, ...] = (),
    sse: bool = True,
    subset: list[str] | None = None,
) -> None:
    """One ext_proc stream: request headers + body, then (when routed) the response."""
    call = stub.Process()
    await call.write(headers_msg({**BASE_HEADERS, "x-request-id": rid}, subset=subset))
    for m in body_msgs(body):
        await call.write(m)
    first = await call.read()
    if first != grpc.aio.EOF and not first.HasField("immediate_response"):
        ctype = "text/event-stream" if sse else "application/json"
        await call.write(
            ep.ProcessingRequest(response_headers=_hdrs({":status": status, "content-type": ctype}))
        )
        await call.read()
        for i, chunk in enumerate(chunks):
            await call.write(_body(chunk, i == len(chunks) - 1))
            await call.read()
    await call.done_writing()
    while await call.read() != grpc.aio.EOF:
        pass


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


USAGE = {"prompt_tokens": 120, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 64}}


async def _traffic(serve: Any) -> Any:
    """Every kind of request the upstream series count; returns the picker's metrics."""
    servicer, source, _, metrics = build(PODS, models=("qwen",))
    stub = await serve(servicer)
    delta = {"choices": [{"index": 0, "delta": {"content": "hi"}}]}
    # a stream: a content chunk, then the usage and [DONE]
    await _request(
        stub,
        "s1",
        chat(model="qwen"),
        chunks=(_sse(delta), _sse({"choices": [], "usage": USAGE}) + b"data: [DONE]\n\n"),
    )
    # an answer that is not a stream, with its usage
    plain = orjson.dumps(
        {"model": "qwen", "messages": [{"role": "user", "content": "x " * 40}], "stream": False}
    )
    await _request(stub, "j1", plain, sse=False, chunks=(orjson.dumps({"choices": [], "usage": USAGE}),))
    # the model server fails
    await _request(stub, "e1", chat(model="qwen", text="other"), status="500", sse=False, chunks=(b"{}",))
    # refused by the picker: not JSON (400)
    await _request(stub, "b1", b"not json")
    # no endpoint can be chosen: the gateway's subset hint names none of the pool (503)
    await _request(stub, "f1", chat(model="qwen"), subset=["10.9.9.9"])
    source.set_metrics(
        PODS[0].address, dataclasses.replace(idle_metrics(), waiting=4, running=2, kv_usage=0.5)
    )
    source.set_metrics(
        PODS[1].address, dataclasses.replace(idle_metrics(), waiting=0, running=4, kv_usage=0.1)
    )
    metrics.upstream.pool_name = metrics.llmd.pool_name = "qwen-pool"
    await HealthReporter(source, metrics, lambda _a: False).refresh()
    return metrics


def _families(registry: Any) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}


def _exposed(claim: Claim) -> str:
    """The family name the parser reports (a counter's without ``_total``)."""
    return claim.name.removesuffix("_total") if claim.kind == "counter" else claim.name


async def test_every_claimed_upstream_series_is_exported_with_upstreams_type_and_labels(serve: Any) -> None:
    metrics = await _traffic(serve)
    families = _families(metrics.registry)
    problems = []
    for claim in (*LLMD_CLAIMS, *GIE_CLAIMS):
        fam = families.get(_exposed(claim))
        if fam is None:
            problems.append(f"{claim.name}: not exported")
            continue
        if fam.type != claim.kind:
            problems.append(f"{claim.name}: {fam.type}, upstream {claim.kind}")
        label_sets = {frozenset(k for k in s.labels if k != "le") for s in fam.samples}
        if not fam.samples:
            problems.append(f"{claim.name}: no sample after the traffic")
        elif label_sets != {frozenset(claim.labels)}:
            problems.append(
                f"{claim.name}: labels {sorted(map(sorted, label_sets))}, upstream {list(claim.labels)}"
            )
    assert not problems, "\n".join(problems)


async def test_the_llmd_series_count_what_upstreams_count(serve: Any) -> None:
    metrics = await _traffic(serve)
    get = metrics.registry.get_sample_value
    req = {"model_name": "qwen", "target_model_name": "qwen", "fairness_id": FAIRNESS_ID, "priority": "0"}
    assert get("llm_d_epp_request_total", req) == 3.0  # routed: the stream, the JSON answer, the 500
    assert get("llm_d_epp_request_error_total", {**req, "error_code": "ModelServerError"}) == 1.0
    refused = {"model_name": "", "target_model_name": "", "fairness_id": FAIRNESS_ID, "priority": "0"}
    assert get("llm_d_epp_request_error_total", {**refused, "error_code": "BadRequest"}) == 1.0
    assert get("llm_d_epp_request_error_total", {**req, "error_code": "ServiceUnavailable"}) == 1.0
    assert get("llm_d_epp_request_running", req) == 0.0
    # streaming: the request asked for a stream ("stream": true, the 500 too) or the answer is one
    assert get("llm_d_epp_request_ttft_seconds_count", {**req, "streaming": "true"}) == 2.0
    assert get("llm_d_epp_request_ttft_seconds_count", {**req, "streaming": "false"}) == 1.0
    assert get("llm_d_epp_request_streaming_itl_seconds_count", req) == 1.0  # two chunks, one gap
    assert get("llm_d_epp_request_streaming_tpot_seconds_count", req) == 1.0
    assert get("llm_d_epp_request_input_tokens_sum", req) == 240.0
    assert get("llm_d_epp_request_cached_tokens_sum", req) == 128.0
    assert get("llm_d_epp_request_duration_seconds_count", req) == 3.0
    assert (get("llm_d_epp_response_size_bytes_sum", req) or 0) > 0
    attempt = {"target_model_name": "qwen", "namespace": "", "port": "8000"}
    ok = sum(
        get("llm_d_epp_scheduler_attempts_total", {**attempt, "status": "success", "endpoint_name": pod})
        or 0.0
        for pod in ("qwen-0", "qwen-1")
    )
    assert ok == 3.0
    assert get("llm_d_epp_scheduler_attempts_total", FAILED_ATTEMPT) == 1.0
    assert get("llm_d_epp_extproc_streams_total", {"code": "OK"}) == 5.0
    # request headers to the routing reply or the refusal: 3 routed, the 400 and the 503
    assert get("llm_d_epp_request_processing_duration_seconds_count") == 5.0
    assert get("llm_d_epp_response_processing_duration_seconds_count") == 3.0
    assert get("llm_d_epp_extproc_streams_inflight") == 0.0
    pool = {"name": "qwen-pool"}
    assert get("llm_d_epp_ready_endpoints", pool) == 2.0
    assert get("llm_d_epp_average_queue_size", pool) == 2.0
    assert get("llm_d_epp_std_dev_queue_size", pool) == 2.83  # sample deviation of (4, 0), 2 decimals
    assert get("llm_d_epp_average_running_requests", pool) == 3.0
    assert get("llm_d_epp_average_kv_cache_utilization", pool) == 0.3
    assert get("llm_d_epp_per_endpoint_queue_size", {**pool, "model_server_endpoint": "qwen-0"}) == 4.0
    assert get("inference_pool_per_pod_queue_size", {**pool, "model_server_pod": "qwen-0"}) == 4.0
    assert get("inference_pool_average_running_requests", pool) == 3.0
    gie = {"model_name": "qwen", "target_model_name": "qwen"}
    assert get("inference_objective_request_error_total", {**gie, "error_code": "ModelServerError"}) == 1.0
    assert get("inference_objective_request_total", {**gie, "priority": "0"}) == 3.0


def _docs_block(name: str) -> set[str]:
    text = DOCS.read_text()
    match = re.search(rf"<!-- generated: {name} -->\n(.*?)<!-- end generated -->", text, re.S)
    assert match is not None, name
    rows = match.group(1).splitlines()[2:]
    return {n.strip(" `") for row in rows for n in row.split("|")[1].split(",")}


def test_the_claims_and_the_docs_tables_list_the_same_names() -> None:
    llmd_claimed = {c.name for c in LLMD_CLAIMS}
    assert _docs_block("llmd-metrics") == llmd_claimed
    assert {c.name for c in GIE_CLAIMS} <= _docs_block("upstream-metrics")
    assert _docs_block("llmd-not-exported") == {n.name for n in LLMD_NOT_EXPORTED}
    assert _docs_block("gie-not-exported") == {n.name for n in GIE_NOT_EXPORTED}
    for claimed, skipped in ((LLMD_CLAIMS, LLMD_NOT_EXPORTED), (GIE_CLAIMS, GIE_NOT_EXPORTED)):
        names = [c.name for c in claimed] + [n.name for n in skipped]
        assert len(names) == len(set(names)), "a name is both claimed and not exported, or listed twice"


async def test_a_dropped_endpoint_takes_its_scheduling_attempt_series_with_it(serve: Any) -> None:
    """Pods come and go: the attempt series of an address discovery dropped go, as the picker's
    own per-endpoint series do (``PickerMetrics.forget_endpoint``)."""
    metrics = await _traffic(serve)
    get = metrics.registry.get_sample_value
    routed = [
        (pod, address)
        for pod, address in (("qwen-0", PODS[0].address), ("qwen-1", PODS[1].address))
        if get("llm_d_epp_scheduler_attempts_total", {"status": "success", "target_model_name": "qwen",
                                                      "endpoint_name": pod, "namespace": "", "port": "8000"})
    ]  # fmt: skip
    assert routed
    for pod, address in routed:
        metrics.forget_endpoint(address)
        attempt = {"status": "success", "target_model_name": "qwen", "namespace": "", "port": "8000"}
        assert get("llm_d_epp_scheduler_attempts_total", {**attempt, "endpoint_name": pod}) is None
        assert get("inference_extension_scheduler_attempts_total", {**attempt, "pod_name": pod}) is None
    assert get("llm_d_epp_scheduler_attempts_total", FAILED_ATTEMPT) == 1.0
