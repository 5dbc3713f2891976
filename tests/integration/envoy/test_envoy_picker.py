"""Real Envoy + the picker (grpc.aio, real datastore: static discovery, /metrics scraping, approximate
index) + small aiohttp model servers that report which address served them."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable

import orjson
import pytest

from smetric.epp.config import parse_config
from tests.support.envoy_stack import (
    MAX_BODY,
    Stack,
    _decode,
    make_stack,
    session_body,
)

pytestmark = pytest.mark.integration


async def test_multi_turn_session_sticks(stack: Stack) -> None:
    status, first = await stack.post(session_body("s1", 0))
    assert status == 200
    for turns in range(1, 5):
        status, info = await stack.post(session_body("s1", turns, stream=turns % 2 == 0))
        assert status == 200 and info["served_by"] == first["served_by"]
    reg = stack.servicer.metrics.registry
    assert reg.get_sample_value("smetric_epp_decisions_total", {"policy": "smetric", "reason": "stick"}) == 4


async def test_new_sessions_balance(stack: Stack) -> None:
    served = [(await stack.post(session_body(f"new{i}", 0)))[1]["served_by"] for i in range(6)]
    assert len(set(served)) == 3


async def test_overloaded_session_migrates(stack: Stack) -> None:
    """The session's instance still has its prefix but the prefill already dispatched to it (the
    ledger) would push this turn past its TTFT SLO: the turn migrates; with that work done it sticks."""
    _, first = await stack.post(session_body("hot", 0))
    home = stack.backend(str(first["served_by"]))
    home.held = asyncio.Event()
    # two different ~5k-token tool outputs: ~0.8 s of prefill each, TTFT SLO ~1.35 s
    a = session_body("hot", 1)
    a["messages"].append({"role": "user", "content": "first tool output " * 1200})  # type: ignore[attr-defined]
    b = session_body("hot", 1)
    b["messages"].append({"role": "user", "content": "other tool output " * 1200})  # type: ignore[attr-defined]
    task_a = asyncio.create_task(stack.post(a))
    for _ in range(200):
        if len(home.seen) == 2:
            break
        await asyncio.sleep(0.01)
    status, info = await asyncio.wait_for(stack.post(b), 10)
    assert status == 200 and info["served_by"] != home.address
    home.held.set()
    status_a, info_a = await task_a
    assert status_a == 200 and info_a["served_by"] == home.address
    reg = stack.servicer.metrics.registry
    assert (
        reg.get_sample_value("smetric_epp_decisions_total", {"policy": "smetric", "reason": "migrate"}) == 1
    )
    assert reg.get_sample_value("smetric_epp_decisions_total", {"policy": "smetric", "reason": "stick"}) == 1


async def test_dead_endpoint_is_not_chosen(stack: Stack) -> None:
    dead = stack.backends[0]
    await dead.stop()
    for _ in range(100):
        if stack.datastore.is_stale(dead.address):
            break
        await asyncio.sleep(0.05)
    served = {(await stack.post(session_body(f"d{i}", 0)))[1]["served_by"] for i in range(6)}
    assert served and dead.address not in served


async def test_subset_hint_is_honoured(stack: Stack) -> None:
    target = stack.backends[2]
    for i in range(4):
        status, info = await stack.post(
            session_body(f"sub{i}", 0), {"x-gateway-destination-endpoint-subset": f"{target.ip}:1"}
        )
        assert status == 200 and info["served_by"] == target.address
    status, _ = await stack.post(
        session_body("none", 0), {"x-gateway-destination-endpoint-subset": "10.9.9.9:80"}
    )
    assert status == 503


async def test_large_and_streamed_bodies_arrive_intact(stack: Stack) -> None:
    big = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "y" * (1024 * 1024)}]})
    status, info = await stack.post(big)
    assert status == 200 and info["length"] == len(big) and info["sha256"] == hashlib.sha256(big).hexdigest()

    payload = orjson.dumps(session_body("chunked", 2)) + b" " * 200_000

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(payload), 7_000):
            yield payload[i : i + 7_000]
            await asyncio.sleep(0)

    async with stack.session.post(stack.url + "/v1/chat/completions", data=chunks()) as r:
        info = _decode(await r.read())
        assert r.status == 200 and info["sha256"] == hashlib.sha256(payload).hexdigest()


async def test_streaming_response_passes_through_and_feeds_usage(stack: Stack) -> None:
    async with stack.session.post(
        stack.url + "/v1/chat/completions", data=orjson.dumps(session_body("sse", 0, stream=True))
    ) as r:
        raw = await r.read()
    assert r.status == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert raw.endswith(b"data: [DONE]\n\n") and raw.count(b"data: ") == 4
    reg = stack.servicer.metrics.registry
    assert reg.get_sample_value("smetric_epp_usage_tokens_total", {"kind": "cached"}) == 40
    assert reg.get_sample_value("smetric_epp_ttft_seconds_count") == 1
    assert len(stack.servicer.picker.ledger) == 0


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{oops", 400),
        (orjson.dumps({"messages": [{"role": "user", "content": "hi"}]}), 400),
        (orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "z" * (MAX_BODY + 10)}]}), 413),
    ],
    # short ids: pytest puts the test id in PYTEST_CURRENT_TEST, which the Envoy child inherits, and
    # a 3 MiB id is over the kernel's limit for one environment string (E2BIG at exec)
    ids=["not-json", "no-model", "over-the-body-limit"],
)
async def test_malformed_requests_get_the_documented_status(stack: Stack, body: bytes, status: int) -> None:
    got, doc = await stack.post(body)
    assert got == status
    assert doc["error"]["code"] == status  # type: ignore[index]
    assert not any(b.seen for b in stack.backends)


async def test_buffered_mode_routes_and_delivers_the_body() -> None:
    async for s in make_stack("BUFFERED"):
        body = orjson.dumps(session_body("buf", 1))
        status, info = await s.post(body)
        assert status == 200 and info["sha256"] == hashlib.sha256(body).hexdigest()
        status, info2 = await s.post(session_body("buf", 2))
        assert info2["served_by"] == info["served_by"]
        status, _ = await s.post(b"{bad")
        assert status == 400


async def test_pd_disaggregation_routes_to_decode_with_the_prefiller_header() -> None:
    cfg = parse_config(
        {"policy": {"name": "smetric"}, "pdDisaggregation": {"enabled": True}}
    )  # sticky sessions: smetric
    async for s in make_stack(roles=("prefill", "prefill", "decode"), cfg=cfg):
        prefill = {s.backends[0].address, s.backends[1].address}
        prefillers = []
        for turns in range(3):
            status, info = await s.post(session_body("pd", turns))
            assert status == 200 and info["served_by"] == s.backends[2].address
            prefillers.append(info["prefiller"])
        assert prefillers[0] in prefill and len(set(prefillers)) == 1  # the session sticks to its prefill pod


async def test_selective_pd_keeps_later_turns_on_the_decode_pod() -> None:
    """pdDisaggregation.nonCachedTokens: the first turn takes the prefill hop; once the decode pod
    holds the session's prompt, a turn whose new part is short skips it (no x-prefiller-host-port)."""
    cfg = parse_config(
        {"policy": {"name": "smetric"}, "pdDisaggregation": {"enabled": True, "nonCachedTokens": 200}}
    )
    async for s in make_stack(roles=("prefill", "decode", "decode"), cfg=cfg):
        decode = {s.backends[1].address, s.backends[2].address}
        status, first = await s.post(session_body("sel", 0))
        assert status == 200 and first["served_by"] in decode and first["prefiller"]
        for turns in range(1, 4):
            status, info = await s.post(session_body("sel", turns))
            assert status == 200 and info["served_by"] == first["served_by"]
            assert not info["prefiller"]  # about 100 new tokens per turn: under the threshold


async def _until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    for _ in range(int(timeout_s / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition never held")


async def test_observer_response_path_feeds_the_same_observations() -> None:
    """--response-path=observer: Envoy sends the response to a second, observability_mode ext_proc
    stream; sessions still stick, SSE and JSON pass intact, usage/TTFT reach the picker, the ledger
    empties, and a held first token still blocks the ledger (so an overloaded turn migrates)."""
    async for s in make_stack(response_path="observer"):
        await _observer_checks(s)


async def _observer_checks(s: Stack) -> None:
    reg = s.servicer.metrics.registry
    status, first = await s.post(session_body("obs", 0))
    assert status == 200
    for turns in range(1, 4):
        status, info = await s.post(session_body("obs", turns, stream=turns == 2))
        assert status == 200 and info["served_by"] == first["served_by"]
    async with s.session.post(
        s.url + "/v1/chat/completions", data=orjson.dumps(session_body("obs-sse", 0, stream=True))
    ) as r:
        raw = await r.read()
    assert r.status == 200 and raw.endswith(b"data: [DONE]\n\n") and raw.count(b"data: ") == 4
    await _until(lambda: reg.get_sample_value("smetric_epp_ttft_seconds_count") == 2)
    await _until(lambda: len(s.servicer.picker.ledger) == 0)
    assert reg.get_sample_value("smetric_epp_usage_tokens_total", {"kind": "cached"}) == 5 * 40
    assert reg.get_sample_value("smetric_epp_observer_streams_total", {"outcome": "matched"}) == 5

    home = s.backend(str(first["served_by"]))
    home.held = asyncio.Event()
    held = asyncio.create_task(s.post(session_body("obs", 4)))
    await _until(lambda: len(home.seen) == 5)
    assert len(s.servicer.picker.ledger) == 1  # no first byte yet: its prefill is still queued
    home.held.set()
    assert (await held)[0] == 200
    await _until(lambda: len(s.servicer.picker.ledger) == 0)
    assert reg.get_sample_value("smetric_epp_observer_streams_total", {"outcome": "missing"}) is None
