"""Request path: hostile headers, paths and bodies (real grpc.aio, real protobuf)."""

from __future__ import annotations

import asyncio

import grpc
import orjson

from smetric.epp.parse.body import parse_body
from smetric.epp.parse.errors import RequestError
from smetric.epp.server.guard import TRUSTED_HEADERS, path_allowed
from smetric.epp.server.servicer import ServicerSettings
from tests.support.epp_harness import BASE_HEADERS, EPS, body_msgs, build, chat, exchange, headers_msg


def removed(resp: object) -> set[str]:
    return set(resp.request_headers.response.header_mutation.remove_headers)  # type: ignore[attr-defined]


async def test_client_copies_of_routing_headers_are_removed_or_overwritten(serve: object) -> None:
    servicer, *_ = build()
    stub = await serve(servicer)  # type: ignore[operator]
    hostile = {h: "127.0.0.1:9901" for h in TRUSTED_HEADERS}
    out = await exchange(stub, [headers_msg({**BASE_HEADERS, **hostile}), *body_msgs(chat())])
    mutation = out[0].request_headers.response.header_mutation
    set_ = {h.header.key: h.header.raw_value.decode() for h in mutation.set_headers}
    for h in TRUSTED_HEADERS:  # every routing header is either the picker's value or removed
        if h.startswith("x-envoy-"):  # not mutable from ext_proc: the gateway's scrub removes it
            assert h not in removed(out[0])
            continue
        assert h in removed(out[0]) or (h in set_ and "9901" not in set_[h]), h
    assert "x-prefiller-host-port" in removed(out[0])
    assert all(a in EPS for a in set_["x-gateway-destination-endpoint"].split(","))


async def test_ledger_is_keyed_on_the_pickers_own_id_not_the_clients(serve: object) -> None:
    servicer, *_ = build()
    stub = await serve(servicer)  # type: ignore[operator]
    calls = []
    for text in ("one", "two"):  # two in-flight requests reusing one client x-request-id
        call = stub.Process()
        await call.write(headers_msg({**BASE_HEADERS, "x-request-id": "same"}))
        for m in body_msgs(chat(text=text)):
            await call.write(m)
        await call.read()
        calls.append(call)
    assert len(servicer.picker.ledger) == 2  # before: the second overwrote the first
    for call in calls:
        await call.done_writing()
        while await call.read() != grpc.aio.EOF:
            pass
    assert len(servicer.picker.ledger) == 0


async def test_non_inference_paths_are_404(serve: object) -> None:
    servicer, *_ = build()
    stub = await serve(servicer)  # type: ignore[operator]
    for path in ("/metrics", "/reset_prefix_cache", "/v1/chat/completions/../../metrics"):
        out = await exchange(stub, [headers_msg({**BASE_HEADERS, ":path": path}), *body_msgs(chat())])
        assert out[0].immediate_response.status.code == 404, path
    assert path_allowed("/v1/chat/completions?x=1") and path_allowed("/v1/models/")
    assert not path_allowed("/v1/chat/completionsX")


def nested(depth: int) -> bytes:
    """A user message whose content is ``depth`` tool_result parts, each inside the previous."""
    content = b'{"type":"tool_result","content":' * depth + b'"x"' + b"}" * depth
    return b'{"model":"m","messages":[{"role":"user","content":' + content + b"}]}"


async def test_deeply_nested_content_is_400_not_500(serve: object) -> None:
    try:
        parse_body(nested(600), "/v1/chat/completions")
    except RequestError as exc:
        assert exc.status == 400 and "nested" in exc.message
    else:
        raise AssertionError("no error")
    assert parse_body(nested(8), "/v1/chat/completions").prompt_text.endswith("x\n")  # real depth is fine
    servicer, *_ = build()
    stub = await serve(servicer)  # type: ignore[operator]
    out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(nested(600))])
    assert out[0].immediate_response.status.code == 400


async def test_global_body_budget_refuses_with_503_and_is_returned(serve: object) -> None:
    servicer, *_ = build(settings=ServicerSettings(max_body_bytes=1 << 20, body_budget_bytes=150_000))
    stub = await serve(servicer)  # type: ignore[operator]
    big = chat(text="y" * 100_000)
    first = stub.Process()  # holds ~100 kB, not finished
    await first.write(headers_msg(BASE_HEADERS))
    await first.write(body_msgs(big, 2)[0])
    for _ in range(500):
        if servicer.budget.used_bytes:
            break
        await asyncio.sleep(0.01)
    out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(big, 2)])
    assert out[0].immediate_response.status.code == 503
    assert b"budget" in out[0].immediate_response.body
    first.cancel()
    for _ in range(500):
        if not servicer.budget.used_bytes:
            break
        await asyncio.sleep(0.01)
    assert servicer.budget.used_bytes == 0  # a cancelled stream gives its bytes back
    out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(big, 2)])
    assert out[0].HasField("request_headers")  # routed now
    assert servicer.budget.used_bytes == 0


async def test_large_bodies_are_parsed_off_the_event_loop(serve: object) -> None:
    servicer, *_ = build(settings=ServicerSettings(max_body_bytes=4 << 20, offload_parse_bytes=64 * 1024))
    stub = await serve(servicer)  # type: ignore[operator]
    out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(chat(text="z" * 200_000), 4)])
    assert out[0].HasField("request_headers") and servicer.offload.parsed == 1
    echoed = b"".join(r.request_body.response.body_mutation.streamed_response.body for r in out[1:])
    assert orjson.loads(echoed)["messages"][-1]["content"] == "z" * 200_000
    out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(chat())])  # small: inline
    assert servicer.offload.parsed == 1
    bad = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(b"{" * 70_000)])
    assert bad[0].immediate_response.status.code == 400  # errors from the worker are still 400


async def test_queued_prefill_gauge_shows_dispatched_work(serve: object) -> None:
    servicer, *_ = build()
    stub = await serve(servicer)  # type: ignore[operator]
    call = stub.Process()
    await call.write(headers_msg(BASE_HEADERS))
    for m in body_msgs(chat(text="q" * 4000)):
        await call.write(m)
    reply = await call.read()
    dest = {
        h.header.key: h.header.raw_value.decode()
        for h in reply.request_headers.response.header_mutation.set_headers
    }["x-smetric-destination-primary"]
    gauge = servicer.metrics.registry.get_sample_value(
        "smetric_epp_endpoint_queued_prefill_seconds", {"endpoint": dest}
    )
    assert gauge is not None and gauge > 0  # before: only set when an entry left (always 0)
    call.cancel()
