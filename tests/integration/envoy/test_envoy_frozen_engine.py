"""A frozen or dying engine through real Envoy and the picker's real gRPC server, on both upstreams
(the override_host pool cluster and the ORIGINAL_DST path, whose retries go through one
ORIGINAL_DST cluster per attempt). One of two backends is chosen by the picker (its /metrics still
answers) and never answers a request: either it holds it (frozen: the kernel accepted the
connection) or it closes the connection before any response (dead). Every request sent to it is
retried on the picker's next fallback and gets 200 from the other backend -- the frozen one after
the gateway's per-try idle timeout, the dead one at once. With the per-try idle timeout off the
frozen requests wait for the stream idle timeout and get 504; with retries off the dead ones get
503."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from tests.support.envoy_stack import Backend, Dying, picker_and_envoy, session_body

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PER_TRY_S = 2.0
IDLE_S = 8.0
LATE_S = 1.5  # below PER_TRY_S: the per-try idle timeout does not reset the late fallback itself


class Late(Backend):
    """Answers after LATE_S of silence (a long prefill)."""

    async def chat(self, request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(LATE_S)
        return await super().chat(request)


@asynccontextmanager
async def _stack(
    pool: bool, dying: bool = False, route_to: str = "", late: bool = False, **envoy: Any
) -> AsyncIterator[tuple[str, Backend, Backend]]:
    """``route_to``: the gateway route's cluster replaced by that one (its retry policy kept);
    ``late``: the good backend sends its first byte after LATE_S."""
    async with AsyncExitStack() as stack:
        frozen = (Dying if dying else Backend)("127.0.0.1")
        good = (Late if late else Backend)("127.0.0.2")
        frozen.held = asyncio.Event()  # never set: it never answers a request
        for b in (frozen, good):
            await b.start()
            stack.push_async_callback(b.stop)
        stack.callback(frozen.held.set)  # let its handlers end before the backend stops

        def reroute(config: dict[str, Any]) -> None:  # the route's cluster replaced, its retry policy kept
            hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
            hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"][0]["route"]["cluster"] = (
                route_to
            )

        url = await picker_and_envoy(
            stack,
            (frozen, good),
            pool=pool,
            mutate=reroute if route_to else None,
            **{"stream_idle_timeout_s": IDLE_S, **envoy},
        )
        yield url, frozen, good


async def _send(url: str, n: int, headers: dict[str, str] | None = None) -> list[tuple[int, str, float]]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=IDLE_S * 3)) as client:

        async def one(i: int) -> tuple[int, str, float]:
            t0 = time.monotonic()
            body = orjson.dumps(session_body(f"frozen-{i}", 0))
            async with client.post(url + "/v1/chat/completions", data=body, headers=headers) as r:
                await r.read()
                return r.status, r.headers.get("x-smetric-served-by", ""), time.monotonic() - t0

        return await asyncio.gather(*(one(i) for i in range(n)))


UPSTREAMS = pytest.mark.parametrize("pool", [True, False], ids=["pool", "original_dst"])


@UPSTREAMS
async def test_requests_sent_to_a_frozen_engine_are_retried_elsewhere(pool: bool) -> None:
    async with _stack(pool, per_try_idle_timeout_s=PER_TRY_S) as (url, frozen, good):
        results = await _send(url, 8)
    assert frozen.seen, "the picker never chose the frozen backend: the test saw nothing"
    assert all(status == 200 and served == good.address for status, served, _ in results), results
    assert max(e for _, _, e in results) < PER_TRY_S + 3.0, results


@UPSTREAMS
async def test_requests_an_engine_resets_before_answering_are_retried_elsewhere(pool: bool) -> None:
    async with _stack(pool, dying=True) as (url, dying, good):
        results = await _send(url, 8)
    assert dying.seen, "the picker never chose the dying backend: the test saw nothing"
    assert all(status == 200 and served == good.address for status, served, _ in results), results


@UPSTREAMS
async def test_without_retries_a_reset_before_the_response_is_a_503(pool: bool) -> None:
    """The guard seen failing: the same stack with EnvoyOptions.retries=0."""
    async with _stack(pool, dying=True, retries=0) as (url, dying, good):
        results = await _send(url, 8)
    failed = [r for r in results if r[0] != 200]
    assert dying.seen and len(failed) == len(dying.seen), results
    assert all(status == 503 for status, _, _ in failed), results
    assert all(served == good.address for status, served, _ in results if status == 200), results


async def test_an_original_dst_cluster_alone_retries_the_same_address() -> None:
    """Why the ORIGINAL_DST path needs one cluster per attempt: routed to the primary's ORIGINAL_DST
    cluster alone, with the same retry policy, every retry reads the same header and goes back to
    the dying backend (Envoy's ORIGINAL_DST load balancer consults no retry host predicate)."""
    async with _stack(False, dying=True, route_to="original_destination_primary") as (url, dying, good):
        results = await _send(url, 8)
    failed = [r for r in results if r[0] != 200]
    assert failed and all(status == 503 for status, _, _ in failed), results
    assert len(dying.seen) == 3 * len(failed), (len(dying.seen), results)  # 1 try + 2 retries each
    assert all(served == good.address for status, served, _ in results if status == 200), results


async def test_a_client_copy_of_a_fallback_header_never_routes() -> None:
    """The gateway derives the fallback headers from the picker's list only: a client's
    ``x-smetric-destination-fallback-1`` naming a backend outside the pool is removed first (were
    it kept, ORIGINAL_DST would take the first of the two values, the client's)."""
    decoy = Backend("127.0.0.3")
    await decoy.start()
    try:
        async with _stack(False, dying=True) as (url, dying, good):
            hostile = {"x-smetric-destination-fallback-1": decoy.address}
            results = await _send(url, 8, headers=hostile)
    finally:
        await decoy.stop()
    assert dying.seen and not decoy.seen, results
    assert all(status == 200 and served == good.address for status, served, _ in results), results


@pytest.mark.parametrize(
    ("idle_s", "status"),
    [(PER_TRY_S + LATE_S + 2.0, 200), (PER_TRY_S + LATE_S - 1.0, 504)],
    ids=["fits", "short"],
)
async def test_the_retry_gets_only_what_is_left_of_the_stream_idle_timeout(
    idle_s: float, status: int
) -> None:
    """Why EnvoyOptions.stream_idle_timeout_s is at least the per-try idle timeout plus the longest
    prefill: Envoy does not restart the stream idle timer for a retry, so a retry whose first byte
    comes LATE_S after a frozen first attempt gets 200 only when per-try + LATE_S fits in it."""
    async with _stack(False, late=True, per_try_idle_timeout_s=PER_TRY_S, stream_idle_timeout_s=idle_s) as (
        url,
        frozen,
        good,
    ):
        results = await _send(url, 8)
    retried = [(s, served) for s, served, elapsed in results if elapsed >= PER_TRY_S]
    assert frozen.seen and retried, results
    assert all(s == status for s, _ in retried), results
    assert all(served == good.address for s, served in retried if s == 200), results
