"""ext_proc servicer over a real grpc.aio channel with real protobuf messages (hermetic)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import grpc
import orjson
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc
from google.protobuf import struct_pb2
from prometheus_client import CollectorRegistry

from smetric.core.names import ROLE_DECODE, ROLE_PREFILL
from smetric.epp.contracts import EndpointInfo, EngineMetrics, PromptKey
from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.parse.body import parse_body
from smetric.epp.server.decide import Picker
from smetric.epp.server.servicer import ExtProcServicer, ServicerSettings
from smetric.epp.server.static import StaticEndpointSource, idle_metrics
from smetric.policy.base import PolicyParams
from smetric.policy.framework import Router
from smetric.policy.registry import make_policy
from tests.support.epp_harness import (
    BASE_HEADERS,
    BUFFERED,
    EPS,
    FakeIndex,
    body_msgs,
    build,
    chat,
    decisions,
    exchange,
    headers_msg,
    set_headers,
)


async def test_full_duplex_streamed_body_in_chunks(serve: object) -> None:
    servicer, _, index, metrics = build()
    stub = await serve(servicer)  # type: ignore[operator]
    body = chat() + b" " * 150_000  # trailing whitespace keeps the JSON valid and spans 3 chunks
    out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(body, 5)])
    head, chunks = out[0], out[1:]
    assert head.HasField("request_headers")
    assert head.request_headers.response.clear_route_cache
    hdrs = set_headers(head)
    assert hdrs["x-smetric-destination-primary"] in EPS
    assert hdrs["content-length"] == str(len(body))
    lb = head.dynamic_metadata.fields["envoy.lb"].struct_value.fields["x-gateway-destination-endpoint"]
    addrs = lb.string_value.split(",")
    assert addrs[0] == hdrs["x-smetric-destination-primary"] and sorted(addrs) == sorted(EPS)
    assert hdrs["x-gateway-destination-endpoint"] == lb.string_value  # header = metadata (protocol 004)
    echoed = [c.request_body.response.body_mutation.streamed_response for c in chunks]
    assert all(len(e.body) <= 62_000 for e in echoed)
    assert b"".join(e.body for e in echoed) == body
    assert [e.end_of_stream for e in echoed] == [False] * (len(echoed) - 1) + [True]
    assert index.routed == [addrs[0]]
    assert decisions(metrics, "balance") == 1


async def test_destination_list_primary_sends_one_endpoint(serve: object) -> None:
    """``--destination-list primary`` (the operator sets it for Envoy AI Gateway and kgateway, whose
    ORIGINAL_DST cluster reads one ip:port): header and metadata carry the primary alone, still equal."""
    servicer, *_ = build(settings=ServicerSettings(destination_list="primary"))
    stub = await serve(servicer)  # type: ignore[operator]
    out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(chat())])
    hdrs = set_headers(out[0])
    lb = out[0].dynamic_metadata.fields["envoy.lb"].struct_value.fields["x-gateway-destination-endpoint"]
    primary = hdrs["x-smetric-destination-primary"]
    assert primary in EPS and hdrs["x-gateway-destination-endpoint"] == lb.string_value == primary


async def test_buffered_mode_routes_on_the_body_response(serve: object) -> None:
    servicer, *_ = build()
    stub = await serve(servicer)  # type: ignore[operator]
    body = chat()
    out = await exchange(stub, [headers_msg(BASE_HEADERS, mode=BUFFERED), *body_msgs(body)])
    assert (
        out[0].HasField("request_headers") and not out[0].request_headers.response.header_mutation.set_headers
    )
    assert out[1].HasField("request_body")
    assert out[1].request_body.response.clear_route_cache
    hdrs = set_headers(out[1], "request_body")
    assert hdrs["x-smetric-destination-primary"] in EPS
    assert hdrs["content-length"] == str(len(body))
    assert not out[1].request_body.response.HasField("body_mutation")  # body passes unchanged
    assert (
        out[1]
        .dynamic_metadata.fields["envoy.lb"]
        .struct_value.fields["x-gateway-destination-endpoint"]
        .string_value
    )


async def test_follow_up_turn_sticks_to_the_endpoint_holding_the_session(serve: object) -> None:
    servicer, _, index, metrics = build()
    stub = await serve(servicer)  # type: ignore[operator]
    body = chat(turns=3)
    index.hits = {EPS[2]: len(body) // 4 - 10}
    out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(body)])
    assert set_headers(out[0])["x-smetric-destination-primary"] == EPS[2]
    assert decisions(metrics, "stick") == 1


async def test_subset_hint_restricts_candidates_and_empty_subset_is_503(serve: object) -> None:
    servicer, *_ = build()
    stub = await serve(servicer)  # type: ignore[operator]
    for _ in range(4):
        out = await exchange(stub, [headers_msg(BASE_HEADERS, subset=["10.0.0.2:9999"]), *body_msgs(chat())])
        assert set_headers(out[0])["x-smetric-destination-primary"] == EPS[1]  # matched on IP
    out = await exchange(stub, [headers_msg(BASE_HEADERS, subset=[]), *body_msgs(chat())])
    assert out[-1].immediate_response.status.code == 503


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{not json", 400),
        (b"[1, 2]", 400),
        (orjson.dumps({"messages": [{"role": "user", "content": "x"}]}), 400),
        (orjson.dumps({"model": "m", "what": 1}), 400),
        (orjson.dumps({"model": "m", "messages": "nope"}), 400),
    ],
)
async def test_bad_requests_get_400(serve: object, body: bytes, status: int) -> None:
    servicer, *_ = build()
    stub = await serve(servicer)  # type: ignore[operator]
    # /v1/responses: an allowed path (others are 404) whose body shapes are checked
    out = await exchange(stub, [headers_msg({**BASE_HEADERS, ":path": "/v1/responses"}), *body_msgs(body)])
    assert len(out) == 1 and out[0].immediate_response.status.code == status
    assert orjson.loads(out[0].immediate_response.body)["error"]["code"] == status


async def test_body_over_limit_is_413_without_waiting_for_the_end(serve: object) -> None:
    servicer, *_ = build(max_body=100_000)
    stub = await serve(servicer)  # type: ignore[operator]
    call = stub.Process()
    await call.write(headers_msg(BASE_HEADERS))
    await call.write(ep.ProcessingRequest(request_body=ep.HttpBody(body=b"x" * 60_000)))
    await call.write(ep.ProcessingRequest(request_body=ep.HttpBody(body=b"x" * 60_000)))
    reply = await call.read()
    assert reply.immediate_response.status.code == 413
    call.cancel()


async def test_no_ready_endpoint_is_503(serve: object) -> None:
    servicer, *_ = build(endpoints=())
    stub = await serve(servicer)  # type: ignore[operator]
    out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(chat())])
    assert out[-1].immediate_response.status.code == 503


def saturated(now_s: float) -> EngineMetrics:
    return EngineMetrics(8, 20, 0.95, 1000, 16, 0.0, 0.0, now_s)


async def test_saturated_pool_sheds_only_sheddable_requests(serve: object) -> None:
    servicer, source, *_ = build()
    now = servicer.picker.clock()
    for a in EPS:
        source.set_metrics(a, saturated(now))
    stub = await serve(servicer)  # type: ignore[operator]
    out = await exchange(stub, [headers_msg({**BASE_HEADERS, "x-sheddable": "true"}), *body_msgs(chat())])
    assert out[-1].immediate_response.status.code == 429
    out = await exchange(
        stub,
        [headers_msg({**BASE_HEADERS, "x-gateway-inference-objective": "Sheddable"}), *body_msgs(chat())],
    )
    assert out[-1].immediate_response.status.code == 429
    out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(chat())])
    assert set_headers(out[0])["x-smetric-destination-primary"] in EPS
    source.set_metrics(EPS[0], idle_metrics(now))
    out = await exchange(stub, [headers_msg({**BASE_HEADERS, "x-sheddable": "true"}), *body_msgs(chat())])
    assert set_headers(out[0])["x-smetric-destination-primary"] == EPS[0]


async def test_stale_endpoint_is_not_chosen_while_a_fresh_one_exists(serve: object) -> None:
    servicer, source, *_ = build()
    source.set_metrics(EPS[0], None)  # never scraped
    source.set_metrics(EPS[1], idle_metrics(servicer.picker.clock() - 60.0))  # too old
    stub = await serve(servicer)  # type: ignore[operator]
    for i in range(3):
        out = await exchange(
            stub, [headers_msg({**BASE_HEADERS, "x-request-id": f"s{i}"}), *body_msgs(chat())]
        )
        assert set_headers(out[0])["x-smetric-destination-primary"] == EPS[2]


async def test_bad_slo_header_is_400(serve: object) -> None:
    servicer, *_ = build()
    stub = await serve(servicer)  # type: ignore[operator]
    out = await exchange(stub, [headers_msg({**BASE_HEADERS, "x-slo-ttft-ms": "soon"}), *body_msgs(chat())])
    assert out[0].immediate_response.status.code == 400


async def test_internal_error_is_500_and_the_server_keeps_serving(serve: object) -> None:
    servicer, *_ = build()
    stub = await serve(servicer)  # type: ignore[operator]
    original = servicer.picker.pick

    def boom(*args: object, **kwargs: object) -> object:
        raise RuntimeError("bug")

    servicer.picker.pick = boom  # type: ignore[method-assign]
    out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(chat())])
    assert out[-1].immediate_response.status.code == 500
    servicer.picker.pick = original  # type: ignore[method-assign]
    out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(chat())])
    assert set_headers(out[0])["x-smetric-destination-primary"] in EPS


async def test_header_only_request_is_routed_at_headers(serve: object) -> None:
    servicer, *_ = build()
    stub = await serve(servicer)  # type: ignore[operator]
    out = await exchange(stub, [headers_msg({":method": "GET", ":path": "/v1/models"}, eos=True)])
    hdrs = set_headers(out[0])
    assert hdrs["x-smetric-destination-primary"] in EPS
    assert "x-request-id" in hdrs  # generated and forwarded


def sse(*events: dict[str, object]) -> list[bytes]:
    return [b"data: " + orjson.dumps(e) + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


async def test_response_path_passes_through_and_feeds_ledger_and_rate(serve: object) -> None:
    servicer, *_ = build()
    picker = servicer.picker
    stub = await serve(servicer)  # type: ignore[operator]
    usage = {"prompt_tokens": 500, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 100}}
    chunks = sse({"choices": [{"delta": {"content": "a"}}]}, {"choices": [], "usage": usage})
    for i in range(8):
        call = stub.Process()
        await call.write(headers_msg({**BASE_HEADERS, "x-request-id": f"q{i}"}))
        for m in body_msgs(chat(text=f"hi {i}")):
            await call.write(m)
        head = await call.read()
        dest = set_headers(head)["x-smetric-destination-primary"]
        await call.read()  # echoed body
        assert picker.ledger.queued_cost_s(dest) > 0
        resp_headers = base_pb2.HeaderMap(
            headers=[
                base_pb2.HeaderValue(key=":status", raw_value=b"200"),
                base_pb2.HeaderValue(key="content-type", raw_value=b"text/event-stream"),
            ]
        )
        await call.write(ep.ProcessingRequest(response_headers=ep.HttpHeaders(headers=resp_headers)))
        assert (await call.read()).HasField("response_headers")
        assert picker.ledger.queued_cost_s(dest) > 0  # SSE headers come before the first token
        echoed = b""
        for k, c in enumerate(chunks):
            await call.write(
                ep.ProcessingRequest(response_body=ep.HttpBody(body=c, end_of_stream=k == len(chunks) - 1))
            )
            r = await call.read()
            echoed += r.response_body.response.body_mutation.streamed_response.body
            if k == 0:
                assert picker.ledger.queued_cost_s(dest) == 0  # first token: prefill done
        assert echoed == b"".join(chunks)
        await call.done_writing()
        assert await call.read() == grpc.aio.EOF
    assert len(picker.ledger) == 0
    assert sum(picker.rates.samples(a) for a in EPS) == 8
    reg = servicer.metrics.registry
    assert reg.get_sample_value("smetric_epp_usage_tokens_total", {"kind": "cached"}) == 800
    assert reg.get_sample_value("smetric_epp_ttft_seconds_count") == 8


async def test_error_status_counts_an_endpoint_error_and_clears_the_ledger(serve: object) -> None:
    servicer, *_ = build()
    stub = await serve(servicer)  # type: ignore[operator]
    call = stub.Process()
    await call.write(headers_msg(BASE_HEADERS))
    for m in body_msgs(chat()):
        await call.write(m)
    routed = set_headers(await call.read())
    dest = routed["x-smetric-destination-primary"]
    fallback = routed["x-gateway-destination-endpoint"].split(",")[1]
    await call.read()
    hm = base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key=":status", raw_value=b"503")])
    served = ep.ProcessingRequest(response_headers=ep.HttpHeaders(headers=hm))
    md = struct_pb2.Struct()
    md.update({"x-gateway-destination-endpoint-served": fallback})  # the gateway used a fallback
    served.metadata_context.filter_metadata["envoy.lb"].CopyFrom(md)
    await call.write(served)
    await call.read()
    await call.write(
        ep.ProcessingRequest(response_body=ep.HttpBody(body=b'{"error":"x"}', end_of_stream=True))
    )
    await call.read()
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF
    reg = servicer.metrics.registry
    assert (
        reg.get_sample_value("smetric_epp_endpoint_errors_total", {"endpoint": fallback, "code": "503"}) == 1
    )
    assert len(servicer.picker.ledger) == 0
    assert servicer.picker.rates.samples(dest) == 0


async def test_cancelled_stream_releases_its_ledger_entry(serve: object) -> None:
    servicer, *_ = build()
    stub = await serve(servicer)  # type: ignore[operator]
    call = stub.Process()
    await call.write(headers_msg(BASE_HEADERS))
    for m in body_msgs(chat()):
        await call.write(m)
    await call.read()
    assert len(servicer.picker.ledger) == 1
    call.cancel()
    for _ in range(100):
        if len(servicer.picker.ledger) == 0:
            break
        await asyncio.sleep(0.01)
    assert len(servicer.picker.ledger) == 0


async def test_pd_disaggregation_sets_decode_destination_and_prefiller_header(serve: object) -> None:
    eps = [
        EndpointInfo("10.0.1.1:8000", role=ROLE_PREFILL),
        EndpointInfo("10.0.1.2:8000", role=ROLE_PREFILL),
        EndpointInfo("10.0.2.1:8000", role=ROLE_DECODE),
        EndpointInfo("10.0.2.2:8000", role=ROLE_DECODE),
    ]
    servicer, source, index, _ = build(eps, pd=True)
    now = servicer.picker.clock()
    source.set_metrics("10.0.2.1:8000", EngineMetrics(6, 0, 0.3, 1000, 16, 0, 0, now))
    stub = await serve(servicer)  # type: ignore[operator]
    out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(chat())])
    hdrs = set_headers(out[0])
    assert hdrs["x-smetric-destination-primary"] == "10.0.2.2:8000"  # least loaded decode pod
    assert hdrs["x-prefiller-host-port"] in ("10.0.1.1:8000", "10.0.1.2:8000")
    # both pods hold the prompt afterwards: the prefill pod computed it, the decode pod received it
    assert index.routed == [hdrs["x-prefiller-host-port"], "10.0.2.2:8000"]


async def test_two_replicas_given_the_same_inputs_make_the_same_decisions(serve: object) -> None:
    a, b = build(), build()
    stubs = [await serve(a[0]), await serve(b[0])]  # type: ignore[operator]
    decisions: list[list[str]] = [[], []]
    for k, stub in enumerate(stubs):
        index = (a, b)[k][2]
        for i in range(12):
            index.hits = {EPS[i % 3]: 40} if i % 4 else {}
            body = chat(turns=i % 3, text=f"session {i}")
            out = await exchange(
                stub, [headers_msg({**BASE_HEADERS, "x-request-id": f"r{i}"}), *body_msgs(body, 2)]
            )
            decisions[k].append(set_headers(out[0])["x-smetric-destination-primary"])
    assert decisions[0] == decisions[1]
    assert len(set(decisions[0])) > 1


class TokenizingIndex(FakeIndex):
    """Like a precise index: it tokenizes (here: one token per 2 chars) and records the text it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def key(self, prompt_text: str, token_ids: Sequence[int] | None = None) -> PromptKey:
        self.texts.append(prompt_text)
        ids = tuple(range((len(prompt_text) + 1) // 2))
        return PromptKey(prompt_text, len(ids), token_ids=ids)


class ConcatRenderer:
    def render_chat(self, messages: Sequence[Mapping[str, Any]]) -> str:
        return "".join(str(m.get("content") or "") for m in messages)


async def test_precise_index_sees_the_engine_rendering_and_its_token_count_is_used(serve: object) -> None:
    source = StaticEndpointSource(EPS)
    index = TokenizingIndex()
    params = PolicyParams()
    picker = Picker(source, index, Router(make_policy("smetric", params)), params.cost_model)
    servicer = ExtProcServicer(picker, PickerMetrics(CollectorRegistry()), renderer=ConcatRenderer())
    stub = await serve(servicer)  # type: ignore[operator]
    body = chat(turns=2)
    messages = orjson.loads(body)["messages"]
    expected = "".join(m["content"] for m in messages)
    est_hit_chars4 = parse_body(body, "/v1/chat/completions").est_hit_tokens
    # 0.75 x est_hit in chars/4 units is only ~0.375 x est_hit in the index's (2-char) tokens:
    # below HIT_RATIO once both sides share units, so the session counts as evicted.
    index.hits = {EPS[1]: int(0.75 * est_hit_chars4)}
    call = stub.Process()
    await call.write(headers_msg(BASE_HEADERS))
    for m in body_msgs(body):
        await call.write(m)
    head = await call.read()
    assert index.texts == [expected]
    dest = set_headers(head)["x-smetric-destination-primary"]
    assert decisions(servicer.metrics, "evicted") == 1
    hit = index.hits.get(dest, 0)
    assert picker.ledger.queued_tokens(dest) == (len(expected) + 1) // 2 - hit  # index tokens, not chars/4
    call.cancel()


async def test_a_response_path_bug_passes_the_response_through(
    serve: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from smetric.epp.parse.usage import UsageReader

    def broken(self: UsageReader, chunk: bytes) -> None:
        raise ValueError("bug")

    monkeypatch.setattr(UsageReader, "feed", broken)
    servicer, *_ = build()
    stub = await serve(servicer)  # type: ignore[operator]
    call = stub.Process()
    await call.write(headers_msg(BASE_HEADERS))
    for m in body_msgs(chat()):
        await call.write(m)
    await call.read()
    await call.read()
    hm = base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key=":status", raw_value=b"200")])
    await call.write(ep.ProcessingRequest(response_headers=ep.HttpHeaders(headers=hm)))
    assert (await call.read()).HasField("response_headers")
    await call.write(ep.ProcessingRequest(response_body=ep.HttpBody(body=b'{"ok": 1}', end_of_stream=True)))
    reply = await call.read()
    assert reply.response_body.response.body_mutation.streamed_response.body == b'{"ok": 1}'
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF


async def test_shutdown_drains_open_streams_and_reports_not_serving() -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from smetric.epp.obs.health import HealthReporter
    from smetric.epp.server.app import PickerServer

    servicer, source, _, metrics = build()
    health = HealthReporter(source, metrics, is_stale=lambda a: False)
    server = PickerServer(servicer, health, host="127.0.0.1", grpc_port=0, health_port=0)
    await server.start()
    async with (
        grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch,
        grpc.aio.insecure_channel(f"127.0.0.1:{server.health_port}") as hch,
    ):
        hstub = health_pb2_grpc.HealthStub(hch)
        assert (
            await hstub.Check(health_pb2.HealthCheckRequest())
        ).status == health_pb2.HealthCheckResponse.SERVING
        call = ep_grpc.ExternalProcessorStub(ch).Process()
        await call.write(headers_msg(BASE_HEADERS))
        for m in body_msgs(chat()):
            await call.write(m)
        await call.read()
        await call.read()
        stopping = asyncio.create_task(server.stop(grace_s=5.0))
        await asyncio.sleep(0.2)
        draining = await hstub.Check(health_pb2.HealthCheckRequest())
        assert draining.status == health_pb2.HealthCheckResponse.NOT_SERVING
        hm = base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key=":status", raw_value=b"200")])
        await call.write(
            ep.ProcessingRequest(response_headers=ep.HttpHeaders(headers=hm, end_of_stream=True))
        )
        assert (await call.read()).HasField("response_headers")  # the open stream is still served
        await call.done_writing()
        assert await call.read() == grpc.aio.EOF
        await stopping
    assert len(servicer.picker.ledger) == 0
