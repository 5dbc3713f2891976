"""FULL_DUPLEX_STREAMED response path over a real grpc.aio channel: Envoy runs no message timer in
this mode, so a response chunk the picker does not answer stalls the client forever. Every
chunk (empty ones and the end-of-stream one included) and the trailers must be answered, in
order, and the echoed bytes must be the upstream's bytes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import orjson
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as pm
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc
from prometheus_client import CollectorRegistry

from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.server.decide import Picker
from smetric.epp.server.messages import MAX_CHUNK_BYTES
from smetric.epp.server.servicer import ExtProcServicer
from smetric.epp.server.static import StaticEndpointSource
from smetric.policy.base import PolicyParams
from smetric.policy.framework import Router
from smetric.policy.registry import make_policy

DUPLEX = pm.ProcessingMode.FULL_DUPLEX_STREAMED


class NoIndex:
    def key(self, prompt_text: str, token_ids: object = None) -> object:
        from smetric.epp.contracts import PromptKey

        return PromptKey(prompt_text, (len(prompt_text) + 3) // 4)

    def local_hits(self, key: object, addresses: list[str]) -> dict[str, int]:
        return dict.fromkeys(addresses, 0)

    def on_routed(self, key: object, address: str) -> None:
        pass


def _servicer() -> ExtProcServicer:
    params = PolicyParams()
    source = StaticEndpointSource(("10.0.0.1:8000", "10.0.0.2:8000"))
    picker = Picker(source, NoIndex(), Router(make_policy("smetric", params)), params.cost_model)  # type: ignore[arg-type]
    return ExtProcServicer(picker, PickerMetrics(CollectorRegistry()))


@pytest.fixture
async def stub() -> AsyncIterator[ep_grpc.ExternalProcessorStub]:
    server = grpc.aio.server()
    ep_grpc.add_ExternalProcessorServicer_to_server(_servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield ep_grpc.ExternalProcessorStub(channel)
    await server.stop(None)


def _headers(pairs: dict[str, str], eos: bool = False) -> ep.HttpHeaders:
    hm = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]
    )
    return ep.HttpHeaders(headers=hm, end_of_stream=eos)


async def _routed(stub: ep_grpc.ExternalProcessorStub) -> grpc.aio.StreamStreamCall:
    call = stub.Process()
    head = {":method": "POST", ":path": "/v1/chat/completions", "x-request-id": "r"}
    config = ep.ProtocolConfiguration(request_body_mode=DUPLEX, response_body_mode=DUPLEX)
    await call.write(ep.ProcessingRequest(request_headers=_headers(head), protocol_config=config))
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True})
    await call.write(ep.ProcessingRequest(request_body=ep.HttpBody(body=body, end_of_stream=True)))
    assert (await call.read()).HasField("request_headers")
    assert (await call.read()).request_body.response.body_mutation.streamed_response.end_of_stream
    sse = {":status": "200", "content-type": "text/event-stream"}
    await call.write(ep.ProcessingRequest(response_headers=_headers(sse)))
    assert (await call.read()).HasField("response_headers")
    return call


def _replies_for(chunk: bytes) -> int:
    return max(1, -(-len(chunk) // MAX_CHUNK_BYTES))


@pytest.mark.parametrize("with_trailers", [False, True])
async def test_every_response_chunk_is_answered_in_order(
    stub: ep_grpc.ExternalProcessorStub, with_trailers: bool
) -> None:
    chunks = [b'data: {"choices": []}\n\n', b"", b"x" * (MAX_CHUNK_BYTES + 5), b"data: [DONE]\n\n", b""]
    call = await _routed(stub)
    echoed = b""
    eos_seen = 0
    for k, chunk in enumerate(chunks):
        last = k == len(chunks) - 1 and not with_trailers
        await call.write(ep.ProcessingRequest(response_body=ep.HttpBody(body=chunk, end_of_stream=last)))
        for j in range(_replies_for(chunk)):  # each chunk is answered before the next is sent
            streamed = (await call.read()).response_body.response.body_mutation.streamed_response
            echoed += streamed.body
            eos_seen += streamed.end_of_stream
            assert streamed.end_of_stream == (last and j == _replies_for(chunk) - 1)
    if with_trailers:
        await call.write(ep.ProcessingRequest(response_trailers=ep.HttpTrailers()))
        assert (await call.read()).HasField("response_trailers")
    assert echoed == b"".join(chunks)
    assert eos_seen == (0 if with_trailers else 1)
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF


async def test_header_only_response_is_answered(stub: ep_grpc.ExternalProcessorStub) -> None:
    call = stub.Process()
    head = {":method": "POST", ":path": "/v1/chat/completions"}
    config = ep.ProtocolConfiguration(request_body_mode=DUPLEX, response_body_mode=DUPLEX)
    await call.write(ep.ProcessingRequest(request_headers=_headers(head), protocol_config=config))
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    await call.write(ep.ProcessingRequest(request_body=ep.HttpBody(body=body, end_of_stream=True)))
    assert (await call.read()).HasField("request_headers")
    assert (await call.read()).HasField("request_body")
    await call.write(ep.ProcessingRequest(response_headers=_headers({":status": "204"}, eos=True)))
    assert (await call.read()).HasField("response_headers")
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF
