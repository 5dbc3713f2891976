"""The Kubernetes gateways' InferencePool clusters and retry policies, rebuilt on the real Envoy
(1.40) behind the picker's real gRPC server: what a retry does on each, which decides what the
operator may render (docs/operator.md, "Retries and outlier detection per gateway").

* Envoy AI Gateway v1.1.0 (the InferencePool path of Envoy Gateway), kgateway v2.0: the pool
  cluster is ORIGINAL_DST reading the protocol header ``x-gateway-destination-endpoint``
  (ai-gateway internal/extensionserver/post_cluster_modify.go l. 70-85; kgateway
  endpointpicker/plugin.go ``processBackendObjectIR``). Envoy parses that header as one ip:port
  (original_dst_cluster.cc ``requestOverrideHost``), so the picker's list (primary, fallbacks) is no
  address at all, and a single address is re-read on every attempt: a retry goes to the same host.
* Envoy Gateway v1.9.0's route retry (BackendTrafficPolicy ``retry``): ``previous_hosts`` host
  predicate, 5 host-selection attempts (internal/xds/translator/route.go l. 825-844). On
  ORIGINAL_DST the predicate cannot help: the load balancer has no other host to offer.
* Istio 1.28.0: override_host on the ``envoy.lb`` metadata (pilot/pkg/networking/core/
  cluster_builder.go l. 208-260; the bundled Envoy's pool cluster has the same shape) and, with no
  retry on the HTTPRoute, Istio's default route retry (pilot/pkg/networking/core/route/retry/
  retry.go l. 44-51): connect failures go to the picker's next fallback, a reset does not retry.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import aiohttp
import orjson
import pytest

from smetric.epp.server.servicer import ServicerSettings
from tests.support.envoy_stack import Backend, Dying, picker_and_envoy, session_body

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PROTOCOL_HEADER = "x-gateway-destination-endpoint"
_PREVIOUS_HOSTS = "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"


def eg_retry(retry_on: str) -> dict[str, Any]:
    """Envoy Gateway v1.9.0 ``buildRetryPolicy`` (route.go l. 825-844) with the triggers given."""
    return {
        "retry_on": retry_on,
        "num_retries": 2,
        "retry_host_predicate": [
            {"name": "envoy.retry_host_predicates.previous_hosts", "typed_config": {"@type": _PREVIOUS_HOSTS}}
        ],
        "host_selection_retry_max_attempts": 5,
    }


# Istio 1.28.0 retry.DefaultPolicy (retry.go l. 34-51): what a route gets with no HTTPRoute retry.
ISTIO_DEFAULT_RETRY = eg_retry("connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes")


def protocol_header_cluster(name: str) -> dict[str, Any]:
    """The AI Gateway / kgateway InferencePool cluster: ORIGINAL_DST on the protocol header."""
    return {
        "name": name,
        "type": "ORIGINAL_DST",
        "lb_policy": "CLUSTER_PROVIDED",
        "connect_timeout": "5s",
        "original_dst_lb_config": {"use_http_header": True, "http_header_name": PROTOCOL_HEADER},
    }


Mutate = Callable[[dict[str, Any]], None]


@asynccontextmanager
async def _stack(
    pool: bool, dying: bool, mutate: Mutate, destination_list: str = "all"
) -> AsyncIterator[tuple[str, Backend, Backend]]:
    """The bundled bootstrap (pool cluster with override_host when ``pool``), then ``mutate`` on
    its config: the gateway's cluster and route retry policy put in. ``destination_list``: the
    picker's ``--destination-list``."""
    async with AsyncExitStack() as stack:
        first = (Dying if dying else Backend)("127.0.0.1")
        good = Backend("127.0.0.2")
        for b in (first, good):
            await b.start()
            stack.push_async_callback(b.stop)
        url = await picker_and_envoy(
            stack,
            (first, good),
            pool=pool,
            settings=ServicerSettings(destination_list=destination_list),
            mutate=mutate,
            stream_idle_timeout_s=8.0,
        )
        yield url, first, good


def _route(config: dict[str, Any]) -> dict[str, Any]:
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    route: dict[str, Any] = hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"][0]["route"]
    return route


def gateway(cluster: str, retry: dict[str, Any], add: dict[str, Any] | None = None) -> Mutate:
    def mutate(config: dict[str, Any]) -> None:
        if add is not None:
            config["static_resources"]["clusters"].append(add)
        route = _route(config)
        route["cluster"] = cluster
        route["retry_policy"] = retry

    return mutate


async def _send(url: str, n: int) -> list[tuple[int, str]]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as client:

        async def one(i: int) -> tuple[int, str]:
            body = orjson.dumps(session_body(f"shape-{i}", 0))
            async with client.post(url + "/v1/chat/completions", data=body) as r:
                await r.read()
                return r.status, r.headers.get("x-smetric-served-by", "")

        return await asyncio.gather(*(one(i) for i in range(n)))


async def test_an_original_dst_cluster_on_the_protocol_header_refuses_the_pickers_list() -> None:
    """AI Gateway / kgateway shape, two healthy engines: the picker's ``primary,fallback`` in
    ``x-gateway-destination-endpoint`` is no ip:port for ORIGINAL_DST, so no request reaches an
    engine (503 "no healthy upstream"), with or without a retry policy."""
    mutate = gateway(
        "protocol_header", eg_retry("connect-failure,reset,5xx"), protocol_header_cluster("protocol_header")
    )
    async with _stack(False, False, mutate) as (url, first, good):
        results = await _send(url, 6)
    assert all(status == 503 for status, _ in results), results
    assert not first.seen and not good.seen, (first.seen, good.seen)


async def test_the_primary_alone_routes_through_that_cluster() -> None:
    """The same cluster with the picker at ``--destination-list primary`` (what the operator renders
    for ``envoy-gateway`` and ``kgateway``): every request reaches the engine the picker chose."""
    mutate = gateway(
        "protocol_header", eg_retry("connect-failure,reset,5xx"), protocol_header_cluster("protocol_header")
    )
    async with _stack(False, False, mutate, destination_list="primary") as (url, first, good):
        results = await _send(url, 6)
    assert all(status == 200 for status, _ in results), results
    assert {served for _, served in results} <= {first.address, good.address}, results
    assert len(first.seen) + len(good.seen) == len(results), (first.seen, good.seen)


async def test_envoy_gateway_retry_on_original_dst_resends_to_the_same_host() -> None:
    """Envoy Gateway's retry shape (previous_hosts predicate, 5 host selections) with reset as a
    trigger, on an ORIGINAL_DST cluster routing on one address (the bundled path's primary header,
    the one-address form of the protocol header): every attempt goes to the dying engine, the
    picker's fallback is never tried."""
    mutate = gateway("original_destination_primary", eg_retry("connect-failure,reset,5xx"))
    async with _stack(False, True, mutate) as (url, dying, good):
        results = await _send(url, 8)
    failed = [r for r in results if r[0] != 200]
    assert failed and all(status == 503 for status, _ in failed), results
    assert len(dying.seen) == 3 * len(failed), (len(dying.seen), results)  # 1 try + 2 retries each
    assert all(served == good.address for status, served in results if status == 200), results


async def test_istio_default_retry_on_override_host_leaves_a_reset_unretried() -> None:
    """Istio's shape: override_host on ``envoy.lb`` (the pool cluster) with Istio's default retry.
    Its triggers hold no ``reset``: a request the engine resets before answering gets 503 on the
    first attempt, where the bundled Envoy's policy sends it to the picker's fallback
    (test_envoy_frozen_engine.py, the pool upstream)."""
    async with _stack(True, True, gateway("pool", ISTIO_DEFAULT_RETRY)) as (url, dying, good):
        results = await _send(url, 8)
    failed = [r for r in results if r[0] != 200]
    assert dying.seen and len(failed) == len(dying.seen), (len(dying.seen), results)  # not retried
    assert all(status == 503 for status, _ in failed), results
    assert all(served == good.address for status, served in results if status == 200), results


async def test_override_host_sends_a_reset_retry_to_the_pickers_fallback() -> None:
    """The same override_host cluster and Istio's retry shape with ``reset`` added: each retry takes
    the picker's next entry, so every request gets 200 from the other engine -- what a retry
    policy is for, and only where the cluster walks the picker's list."""
    retry = eg_retry("connect-failure,refused-stream,unavailable,cancelled,reset")
    async with _stack(True, True, gateway("pool", retry)) as (url, dying, good):
        results = await _send(url, 8)
    assert dying.seen, "the picker never chose the dying engine: the test saw nothing"
    assert all(status == 200 and served == good.address for status, served in results), results
