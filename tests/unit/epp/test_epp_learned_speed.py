"""The picker's learned prefill speed (smetric.router.prefill_rate) takes its samples only from
answers of the endpoint it routed to at the first attempt: an answer after a failed attempt (the
gateway's attempt count > 1, or a served endpoint other than the pick's destination) holds the
failed attempt's time and measures another engine. Teaching it to the destination made a recovered
engine look several times slower than the others, so the picker never routed to it again and never
re-learned (the chaos row "engine answering 503 ... and its recovery")."""

from __future__ import annotations

import grpc
import orjson
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from google.protobuf import struct_pb2

from tests.support.epp_harness import BASE_HEADERS, EPS, body_msgs, build, chat, headers_msg, set_headers

USAGE = {"prompt_tokens": 500, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 0}}
CHUNKS = [
    b"data: " + orjson.dumps({"choices": [{"delta": {"content": "a"}}]}) + b"\n\n",
    b"data: " + orjson.dumps({"choices": [], "usage": USAGE}) + b"\n\n",
    b"data: [DONE]\n\n",
]


async def _streamed(stub: object, n: int, extra: dict[str, str], served_fallback: bool = False) -> str:
    """One streamed 200 answer; ``extra`` response headers; ``served_fallback``: the gateway
    reports the pick's first fallback as the endpoint that served it. Returns the destination."""
    call = stub.Process()  # type: ignore[attr-defined]
    await call.write(headers_msg({**BASE_HEADERS, "x-request-id": f"s{n}"}))
    for m in body_msgs(chat(text=f"speed {n}")):
        await call.write(m)
    routed = set_headers(await call.read())
    dest = routed["x-smetric-destination-primary"]
    await call.read()  # the echoed body
    hm = base_pb2.HeaderMap(
        headers=[
            base_pb2.HeaderValue(key=k, raw_value=v.encode())
            for k, v in {":status": "200", "content-type": "text/event-stream", **extra}.items()
        ]
    )
    msg = ep.ProcessingRequest(response_headers=ep.HttpHeaders(headers=hm))
    if served_fallback:
        md = struct_pb2.Struct()
        md.update(
            {"x-gateway-destination-endpoint-served": routed["x-gateway-destination-endpoint"].split(",")[1]}
        )
        msg.metadata_context.filter_metadata["envoy.lb"].CopyFrom(md)
    await call.write(msg)
    await call.read()
    for k, c in enumerate(CHUNKS):
        await call.write(
            ep.ProcessingRequest(response_body=ep.HttpBody(body=c, end_of_stream=k == len(CHUNKS) - 1))
        )
        await call.read()
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF
    return dest


def _samples(servicer: object) -> int:
    return sum(servicer.picker.rates.samples(a) for a in EPS)  # type: ignore[attr-defined]


async def test_a_first_attempt_answer_teaches_the_destination(serve: object) -> None:
    servicer, *_ = build()
    stub = await serve(servicer)  # type: ignore[operator]
    dest = await _streamed(stub, 0, {"x-envoy-attempt-count": "1"})
    assert servicer.picker.rates.samples(dest) == 1 and _samples(servicer) == 1
    reg = servicer.metrics.registry
    assert reg.get_sample_value("smetric_epp_ttft_seconds_count") == 1


async def test_an_answer_after_a_failed_attempt_teaches_no_endpoint(serve: object) -> None:
    servicer, *_ = build()
    stub = await serve(servicer)  # type: ignore[operator]
    await _streamed(stub, 0, {"x-envoy-attempt-count": "2"})  # the primary failed, a fallback answered
    await _streamed(stub, 1, {}, served_fallback=True)  # the gateway names the fallback that served
    assert _samples(servicer) == 0
    reg = servicer.metrics.registry  # still a TTFT the client saw
    assert reg.get_sample_value("smetric_epp_ttft_seconds_count") == 2
