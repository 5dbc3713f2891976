"""An alive but overloaded picker sheds load (503 + retry-after) within a bound.

Envoy runs no ext_proc message timeout in FULL_DUPLEX_STREAMED, so without admission control a
request whose body trickles in, or that waits behind a busy picker, waits without limit."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from smetric.epp.server.guard import Admission, Shed
from smetric.epp.server.servicer import ExtProcServicer, ServicerSettings
from tests.support.epp_harness import BASE_HEADERS, body_msgs, build, chat, exchange, headers_msg


def with_admission(max_inflight: int, budget_s: float, **more: Any) -> ExtProcServicer:
    """A servicer built with these admission settings (and any other ``ServicerSettings`` field)."""
    settings = ServicerSettings(max_inflight_decisions=max_inflight, decision_budget_s=budget_s, **more)
    return build(settings=settings)[0]


def shed_count(servicer: ExtProcServicer, reason: str) -> float:
    value = servicer.metrics.registry.get_sample_value("smetric_epp_shed_total", {"reason": reason})
    return value or 0.0


def assert_shed(resp: object, words: bytes) -> None:
    imm = resp.immediate_response  # type: ignore[attr-defined]
    assert imm.status.code == 503
    set_ = {h.header.key: h.header.raw_value.decode() for h in imm.headers.set_headers}
    assert set_.get("retry-after") == "1"
    assert words in orjson.loads(imm.body)["error"]["message"].encode()


async def test_a_request_whose_body_never_completes_gets_503_within_the_budget(serve: object) -> None:
    servicer = with_admission(max_inflight=8, budget_s=0.3)
    stub = await serve(servicer)  # type: ignore[operator]
    call = stub.Process()
    await call.write(headers_msg(BASE_HEADERS))
    await call.write(body_msgs(chat(), 2)[0])  # the rest of the body never comes
    t0 = time.monotonic()
    resp = await asyncio.wait_for(call.read(), 5.0)  # without the decision budget: no answer at all
    waited_s = time.monotonic() - t0
    assert_shed(resp, b"decision budget")
    assert 0.2 < waited_s < 2.0
    assert shed_count(servicer, "deadline") == 1
    assert servicer.admission.inflight == 0
    assert len(servicer.picker.ledger) == 0
    call.cancel()
    out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(chat())])  # normal ones still route
    assert out[0].HasField("request_headers")


async def test_uploads_in_progress_do_not_fill_the_inflight_limit(serve: object) -> None:
    """Slow or stalled uploads are bounded by the decision budget, not counted: five requests
    stuck mid-body leave a limit of 2 free for complete requests (counted from their headers,
    they shed every complete request with 503)."""
    servicer = with_admission(max_inflight=2, budget_s=30.0)
    stub = await serve(servicer)  # type: ignore[operator]
    held = []
    for _ in range(5):
        call = stub.Process()
        await call.write(headers_msg(BASE_HEADERS))
        await call.write(body_msgs(chat(), 2)[0])
        held.append(call)
    for _ in range(500):
        if servicer.metrics.active_streams._value.get() >= 5:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    assert servicer.admission.inflight == 0
    for _ in range(3):
        out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(chat())])
        assert out[0].HasField("request_headers"), out[0]
    assert shed_count(servicer, "inflight") == 0
    for call in held:
        call.cancel()


async def test_too_many_complete_requests_waiting_get_503_at_once_and_slots_come_back(serve: object) -> None:
    """Complete requests waiting for the parse pool fill the limit; the next one is shed at once."""
    servicer = with_admission(max_inflight=2, budget_s=30.0, offload_parse_bytes=1)  # parse on the pool
    release = asyncio.Event()
    parse = servicer.offload.parse

    async def slow_parse(*args: Any) -> Any:
        await release.wait()
        return await parse(*args)

    servicer.offload.parse = slow_parse  # type: ignore[method-assign]
    stub = await serve(servicer)  # type: ignore[operator]
    held = [
        asyncio.create_task(exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(chat())])) for _ in range(2)
    ]
    for _ in range(500):
        if servicer.admission.inflight == 2:
            break
        await asyncio.sleep(0.01)
    assert servicer.admission.inflight == 2
    t0 = time.monotonic()
    out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(chat())])
    assert time.monotonic() - t0 < 2.0
    assert_shed(out[0], b"waiting for a routing decision (limit 2)")
    assert shed_count(servicer, "inflight") == 1
    release.set()
    for task in held:
        assert (await task)[0].HasField("request_headers")
    assert servicer.admission.inflight == 0  # routed: the slot is free while the response streams
    out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(chat())])
    assert out[0].HasField("request_headers")


async def test_a_message_read_after_the_budget_is_shed_not_routed(serve: object) -> None:
    now = [0.0]
    servicer = with_admission(max_inflight=8, budget_s=1.0)
    servicer.clock = lambda: now[0]
    stub = await serve(servicer)  # type: ignore[operator]
    call = stub.Process()
    await call.write(headers_msg(BASE_HEADERS))
    for _ in range(500):
        if servicer.metrics.active_streams._value.get():
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # the headers are handled and the budget runs from them
    now[0] = 5.0  # the loop was busy for 5 s: the body arrives past the budget
    for m in body_msgs(chat()):
        await call.write(m)
    await call.done_writing()
    out = [r async for r in call]
    assert_shed(out[0], b"waited 5.00 s")
    assert len(servicer.picker.ledger) == 0


def test_admission_bounds_and_validation() -> None:
    a = Admission(1, 2.0)
    a.enter()
    with pytest.raises(Shed) as exc:
        a.enter()
    assert exc.value.reason == "inflight" and exc.value.status == 503
    a.leave()
    a.leave()  # never below zero
    assert a.inflight == 0
    a.check(0.0, 2.0)
    with pytest.raises(Shed):
        a.check(0.0, 2.5)
    for bad in ((0, 1.0), (1, 0.0), (1, float("nan"))):
        with pytest.raises(ValueError):
            Admission(*bad)


def test_flags_have_documented_defaults() -> None:
    from smetric.core.pickerflags import FLAGS

    by_name = {f.name: f for f in FLAGS}
    assert by_name["max-inflight-decisions"].default == 512
    assert by_name["decision-budget-ms"].default == 10_000
    assert ServicerSettings().max_inflight_decisions == 512
    assert ServicerSettings().decision_budget_s == 10.0
