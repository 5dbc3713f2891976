"""--response-path=observer: the response arrives on a separate observability_mode stream (hermetic:
real grpc.aio, real protobuf messages, the servicer's own matching by its x-smetric-request-id)."""

from __future__ import annotations

import asyncio

import grpc
import orjson
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

from smetric.epp.server.servicer import ExtProcServicer, ServicerSettings
from tests.support.epp_harness import BASE_HEADERS, body_msgs, build, chat, exchange, headers_msg, set_headers


def observer_servicer(timeout_s: float = 2.0) -> ExtProcServicer:
    servicer, *_ = build(
        settings=ServicerSettings(response_observer=True, observer_attach_timeout_s=timeout_s)
    )
    return servicer


async def route(stub: ep_grpc.ExternalProcessorStub, rid: str) -> tuple[grpc.aio.StreamStreamCall, str, str]:
    """A routing stream (response skipped, as the observer bootstrap configures it) up to its reply:
    the call, the destination and the picker's own request id (what the observer sees)."""
    call = stub.Process()
    await call.write(headers_msg({**BASE_HEADERS, "x-request-id": rid}))
    for m in body_msgs(chat(text=f"hello {rid}")):
        await call.write(m)
    hdrs = set_headers(await call.read())
    await call.read()  # the echoed body
    assert hdrs["x-smetric-request-id"] != rid  # the picker's own id, not the client's
    return call, hdrs["x-smetric-destination-primary"], hdrs["x-smetric-request-id"]


async def end(call: grpc.aio.StreamStreamCall) -> None:
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF


def _hmap(pairs: dict[str, str]) -> base_pb2.HeaderMap:
    return base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]
    )


def observed(pid: str, sse: bool = True) -> list[ep.ProcessingRequest]:
    usage = {"prompt_tokens": 50, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 10}}
    ctype = "text/event-stream" if sse else "application/json"
    chunks = [
        b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n',
        b"data: " + orjson.dumps({"usage": usage}) + b"\n\n",
    ]
    msgs = [
        ep.ProcessingRequest(
            request_headers=ep.HttpHeaders(headers=_hmap({**BASE_HEADERS, "x-smetric-request-id": pid}))
        ),
        ep.ProcessingRequest(
            response_headers=ep.HttpHeaders(headers=_hmap({":status": "200", "content-type": ctype}))
        ),
        *(
            ep.ProcessingRequest(response_body=ep.HttpBody(body=c, end_of_stream=i == len(chunks) - 1))
            for i, c in enumerate(chunks)
        ),
    ]
    for m in msgs:
        m.observability_mode = True
    return msgs


async def test_observer_after_the_routing_stream_ends_releases_the_ledger_at_the_first_byte(
    serve: object,
) -> None:
    servicer = observer_servicer()
    stub = await serve(servicer)  # type: ignore[operator]
    call, dest, pid = await route(stub, "o1")
    await end(call)  # Envoy closes the routing stream before the response comes
    assert servicer.picker.ledger.queued_cost_s(dest) > 0  # kept for the observer
    replies = await exchange(stub, observed(pid))
    assert replies == []  # observability_mode: Envoy ignores replies, the servicer sends none
    reg = servicer.metrics.registry
    assert len(servicer.picker.ledger) == 0
    assert servicer.picker.rates.samples(dest) == 1
    assert reg.get_sample_value("smetric_epp_ttft_seconds_count") == 1
    assert reg.get_sample_value("smetric_epp_usage_tokens_total", {"kind": "cached"}) == 10
    assert reg.get_sample_value("smetric_epp_observer_streams_total", {"outcome": "matched"}) == 1
    assert not servicer.observers.awaiting


async def test_observer_attaching_before_the_routing_stream_ends(serve: object) -> None:
    servicer = observer_servicer(timeout_s=0.05)
    stub = await serve(servicer)  # type: ignore[operator]
    call, _, pid = await route(stub, "o2")
    assert await exchange(stub, observed(pid, sse=False)) == []
    await end(call)
    await asyncio.sleep(0.1)  # past the attach timeout: nothing may fire twice
    reg = servicer.metrics.registry
    assert len(servicer.picker.ledger) == 0
    assert reg.get_sample_value("smetric_epp_observer_streams_total", {"outcome": "missing"}) is None
    assert not servicer.observers.awaiting


async def test_a_missing_observer_releases_the_ledger_after_the_attach_timeout(serve: object) -> None:
    servicer = observer_servicer(timeout_s=0.05)
    stub = await serve(servicer)  # type: ignore[operator]
    call, dest, pid = await route(stub, "o3")
    await end(call)
    assert len(servicer.picker.ledger) == 1
    for _ in range(100):
        if len(servicer.picker.ledger) == 0:
            break
        await asyncio.sleep(0.01)
    reg = servicer.metrics.registry
    assert len(servicer.picker.ledger) == 0 and servicer.picker.rates.samples(dest) == 0
    assert reg.get_sample_value("smetric_epp_observer_streams_total", {"outcome": "missing"}) == 1
    assert not servicer.observers.awaiting
    # a late observer finds nothing and is ignored
    assert await exchange(stub, observed(pid)) == []
    assert reg.get_sample_value("smetric_epp_observer_streams_total", {"outcome": "unmatched"}) == 1


async def test_an_unknown_observer_is_ignored_and_routing_goes_on(serve: object) -> None:
    servicer = observer_servicer()
    stub = await serve(servicer)  # type: ignore[operator]
    assert await exchange(stub, observed("nobody")) == []
    headerless = observed("x")[1:]  # no request headers at all
    assert await exchange(stub, headerless) == []
    reg = servicer.metrics.registry
    assert reg.get_sample_value("smetric_epp_observer_streams_total", {"outcome": "unmatched"}) == 2
    call, _, _pid = await route(stub, "o4")
    await end(call)


async def test_an_observer_while_inline_is_configured_is_ignored(serve: object) -> None:
    servicer, *_ = build()
    stub = await serve(servicer)  # type: ignore[operator]
    call, _, pid = await route(stub, "o5")
    await end(call)
    assert len(servicer.picker.ledger) == 0  # inline: released when the routing stream ended
    assert await exchange(stub, observed(pid)) == []


async def test_the_picker_ends_the_observer_rpc_at_the_end_of_the_response(serve: object) -> None:
    """Envoy keeps an observability_mode stream open for deferred_close_timeout (5 s) after the
    request unless the server ends it: the picker ends it once the response is complete."""
    servicer = observer_servicer()
    stub = await serve(servicer)  # type: ignore[operator]
    call, _, pid = await route(stub, "o6")
    await end(call)
    obs = stub.Process()
    for m in observed(pid):
        await obs.write(m)
    assert await asyncio.wait_for(obs.read(), 5) == grpc.aio.EOF  # no done_writing from the client
    assert await obs.code() == grpc.StatusCode.OK
    assert len(servicer.picker.ledger) == 0
