"""Shared harness of the servicer tests: a picker with a fake index over static endpoints, a real
grpc.aio server per test, and builders of the ext_proc messages Envoy sends."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import orjson
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as pm
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc
from google.protobuf import struct_pb2
from prometheus_client import CollectorRegistry

from smetric.epp.contracts import EndpointInfo, PromptKey
from smetric.epp.obs.labels import ModelLabels
from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.server.decide import Picker
from smetric.epp.server.servicer import ExtProcServicer, ServicerSettings
from smetric.epp.server.static import StaticEndpointSource
from smetric.policy.base import PolicyParams
from smetric.policy.framework import Router
from smetric.policy.registry import make_policy

FULL_DUPLEX = pm.ProcessingMode.FULL_DUPLEX_STREAMED
BUFFERED = pm.ProcessingMode.BUFFERED
EPS = ("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000")


class FakeIndex:
    """Hits per address set by the test; records where requests were routed."""

    def __init__(self) -> None:
        self.hits: dict[str, int] = {}
        self.routed: list[str] = []

    tokens_per_key = 16  # the PoolIndex contract's key granularity (the tier index reads it)
    store = None  # no KV-event block store

    def key(self, prompt_text: str, token_ids: Sequence[int] | None = None) -> PromptKey:
        return PromptKey(prompt_text, (len(prompt_text) + 3) // 4)

    def local_hits(self, key: PromptKey, addresses: Sequence[str]) -> dict[str, int]:
        return {a: min(self.hits.get(a, 0), key.prompt_tokens) for a in addresses}

    def on_routed(self, key: PromptKey, address: str) -> None:
        self.routed.append(address)


def build(
    endpoints: Sequence[EndpointInfo | str] = EPS,
    *,
    pd: bool = False,
    max_body: int = 1 << 20,
    settings: ServicerSettings | None = None,
    models: Sequence[str] = (),
) -> tuple[ExtProcServicer, StaticEndpointSource, FakeIndex, PickerMetrics]:
    """A servicer over a static pool; ``settings`` replaces ``ServicerSettings(max_body_bytes=max_body)``;
    ``models``: the pool's served models as the metrics' model label knows them (others: ``other``)."""
    source = StaticEndpointSource(endpoints)
    index = FakeIndex()
    params = PolicyParams()
    pd_router = Router(make_policy("smetric", PolicyParams(mode="disaggregated"))) if pd else None
    picker = Picker(
        source, index, Router(make_policy("smetric", params)), params.cost_model, pd_router=pd_router
    )
    metrics = PickerMetrics(CollectorRegistry(), models=ModelLabels(models))
    settings = settings if settings is not None else ServicerSettings(max_body_bytes=max_body)
    return ExtProcServicer(picker, metrics, settings), source, index, metrics


def headers_msg(
    headers: dict[str, str],
    *,
    eos: bool = False,
    mode: int = FULL_DUPLEX,
    subset: list[str] | None = None,
) -> ep.ProcessingRequest:
    hm = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in headers.items()]
    )
    req = ep.ProcessingRequest(
        request_headers=ep.HttpHeaders(headers=hm, end_of_stream=eos),
        protocol_config=ep.ProtocolConfiguration(request_body_mode=mode, response_body_mode=FULL_DUPLEX),
    )
    if subset is not None:
        s = struct_pb2.Struct()
        s.update({"x-gateway-destination-endpoint-subset": subset})
        req.metadata_context.filter_metadata["envoy.lb.subset_hint"].CopyFrom(s)
    return req


def body_msgs(body: bytes, n_chunks: int = 1) -> list[ep.ProcessingRequest]:
    size = max(1, -(-len(body) // n_chunks))
    parts = [body[i : i + size] for i in range(0, len(body), size)] or [b""]
    return [
        ep.ProcessingRequest(request_body=ep.HttpBody(body=p, end_of_stream=i == len(parts) - 1))
        for i, p in enumerate(parts)
    ]


def chat(model: str = "m", turns: int = 0, text: str = "hello") -> bytes:
    messages: list[dict[str, str]] = [{"role": "system", "content": "sys " * 50}]
    for t in range(turns):
        messages += [{"role": "user", "content": f"q{t} {text}"}, {"role": "assistant", "content": f"a{t}"}]
    messages.append({"role": "user", "content": text})
    return orjson.dumps({"model": model, "messages": messages, "stream": True})


BASE_HEADERS = {":method": "POST", ":path": "/v1/chat/completions", "x-request-id": "r1"}


def set_headers(resp: ep.ProcessingResponse, which: str = "request_headers") -> dict[str, str]:
    common = getattr(resp, which).response
    return {h.header.key: h.header.raw_value.decode() for h in common.header_mutation.set_headers}


async def exchange(
    stub: ep_grpc.ExternalProcessorStub, msgs: list[ep.ProcessingRequest]
) -> list[ep.ProcessingResponse]:
    call = stub.Process()
    # The picker may end the stream early (an immediate response such as a 400); stop writing
    # then instead of racing the server's close, and read what it answered.
    try:
        for m in msgs:
            if call.done():
                break
            await call.write(m)
        if not call.done():
            await call.done_writing()
    except asyncio.InvalidStateError:
        pass
    return [r async for r in call]


def decisions(metrics: PickerMetrics, reason: str, policy: str = "smetric") -> float | None:
    """``smetric_epp_decisions_total`` for one policy and reason (None before the first)."""
    return metrics.registry.get_sample_value(
        "smetric_epp_decisions_total", {"policy": policy, "reason": reason}
    )
