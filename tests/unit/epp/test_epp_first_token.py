"""The picker times a stream's first token, not its first bytes: vLLM's Responses stream opens with
``response.created`` / ``response.in_progress`` before the engine produced anything, so the
prefill-done signal (ledger) and the TTFT sample wait for the first chunk with another event."""

from __future__ import annotations

import grpc
import orjson
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep

from smetric.epp.parse.usage import carries_output
from tests.support.epp_harness import BASE_HEADERS, body_msgs, build, headers_msg, set_headers


def _event(kind: str, **fields: object) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **fields}) + b"\n\n"


CREATED = _event("response.created", response={"id": "r", "status": "in_progress", "output": []})
OPENING = CREATED + _event("response.in_progress", response={"id": "r", "output": [{"type": "x"}]})
DELTA = _event("response.output_text.delta", delta="a")


def test_opening_events_are_not_output() -> None:
    assert not carries_output(OPENING)
    assert not carries_output(CREATED[:40]) and not carries_output(CREATED[40:])  # split over chunks
    assert carries_output(OPENING + DELTA) and carries_output(DELTA)
    assert carries_output(b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n')  # chat: no type
    assert carries_output(_event("message_start", message={"usage": {}}))  # Anthropic: first token
    assert carries_output(b'data: {"type":"response.output_text.delta"}\n\n')  # no event line
    assert not carries_output(b"event: ping\ndata: {}\n\n") and not carries_output(b"")


async def test_responses_stream_prefill_ends_at_the_first_delta(serve: object) -> None:
    servicer, *_ = build()
    picker = servicer.picker
    stub = await serve(servicer)  # type: ignore[operator]
    body = orjson.dumps({"model": "m", "input": "hello " * 50, "stream": True})
    call = stub.Process()
    await call.write(headers_msg({**BASE_HEADERS, ":path": "/v1/responses"}))
    for m in body_msgs(body):
        await call.write(m)
    dest = set_headers(await call.read())["x-smetric-destination-primary"]
    await call.read()  # echoed body
    headers = base_pb2.HeaderMap(
        headers=[
            base_pb2.HeaderValue(key=":status", raw_value=b"200"),
            base_pb2.HeaderValue(key="content-type", raw_value=b"text/event-stream"),
        ]
    )
    await call.write(ep.ProcessingRequest(response_headers=ep.HttpHeaders(headers=headers)))
    await call.read()
    await call.write(ep.ProcessingRequest(response_body=ep.HttpBody(body=OPENING)))
    await call.read()
    assert picker.ledger.queued_cost_s(dest) > 0  # opening events: the prefill still runs
    usage = {"input_tokens": 80, "output_tokens": 3, "input_tokens_details": {"cached_tokens": 16}}
    end = _event("response.completed", response={"usage": usage})
    for k, chunk in enumerate((DELTA, end)):
        await call.write(ep.ProcessingRequest(response_body=ep.HttpBody(body=chunk, end_of_stream=k == 1)))
        await call.read()
        assert picker.ledger.queued_cost_s(dest) == 0  # the first delta: prefill done
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF
    reg = servicer.metrics.registry
    assert reg.get_sample_value("smetric_epp_ttft_seconds_count") == 1
    assert reg.get_sample_value("smetric_epp_tpot_seconds_count") == 1  # 3 tokens: one TPOT sample
    assert reg.get_sample_value("smetric_epp_usage_tokens_total", {"kind": "cached"}) == 16
