"""``--metrics-endpoint-auth``: the picker's /metrics behind a TokenReview and a SubjectAccessReview
(get on the non-resource URL /metrics), sent through kubernetes_asyncio to kmock's API server.

kmock stores objects but does not review tokens; :class:`Reviews` answers the two review APIs the
way the API server does (``status.authenticated`` + ``status.user``, ``status.allowed``) for the
tokens and users below, and records each review it answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import aiohttp.web
import attrs
import kmock
import pytest
import pytest_asyncio
from kubernetes_asyncio import client
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.obs.metrics_server import KubeAuthorizer, MetricsServer

PROMETHEUS = "system:serviceaccount:monitoring:prometheus"
USERS = {"prom-token": PROMETHEUS, "bob-token": "bob", "slow-token": PROMETHEUS}
ALLOWED = {PROMETHEUS}


@attrs.define(kw_only=True)
class Reviews(kmock.KubernetesEmulator):
    seen: list[tuple[str, dict[str, Any]]] = attrs.field(factory=list)

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        path = request.url.path
        if str(request.method).upper().endswith("POST") and path.endswith("/tokenreviews"):
            token = request.data["spec"]["token"]
            self.seen.append(("tokenreview", request.data))
            if token.startswith("slow"):
                await asyncio.sleep(5)
            user = USERS.get(token)
            status: dict[str, Any] = {"authenticated": user is not None}
            if user is not None:
                status["user"] = {"username": user, "uid": "u-1", "groups": ["system:authenticated"]}
            return aiohttp.web.json_response(
                {
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenReview",
                    "spec": request.data["spec"],
                    "status": status,
                }
            )
        if str(request.method).upper().endswith("POST") and path.endswith("/subjectaccessreviews"):
            spec = request.data["spec"]
            self.seen.append(("subjectaccessreview", request.data))
            attrs_ = spec.get("nonResourceAttributes") or {}
            allowed = spec.get("user") in ALLOWED and attrs_ == {"path": "/metrics", "verb": "get"}
            return aiohttp.web.json_response(
                {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": spec,
                    "status": {"allowed": allowed},
                }
            )
        return await super()._handle(request)


@pytest.fixture
def kmock_options() -> dict[str, Any]:
    return {"cls": Reviews}


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest_asyncio.fixture
async def server(kmock: Reviews) -> AsyncIterator[tuple[MetricsServer, KubeAuthorizer, FakeClock]]:
    async def factory() -> client.ApiClient:
        return client.ApiClient(client.Configuration(host=str(kmock.url).rstrip("/")))

    clock = FakeClock()
    registry = CollectorRegistry()
    PickerMetrics(registry, "qwen")
    auth = KubeAuthorizer(factory, cache_ttl_s=10.0, max_cached=2, timeout_s=0.5, clock=clock)
    srv = MetricsServer(registry, "127.0.0.1", 0, auth)
    await srv.start()
    try:
        yield srv, auth, clock
    finally:
        await srv.stop()
        await auth.close()


async def _get(srv: MetricsServer, token: str | None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        aiohttp.ClientSession() as s,
        s.get(f"http://127.0.0.1:{srv.port}/metrics", headers=headers) as r,
    ):
        return r.status, await r.text()


async def test_only_an_authorized_token_reads_the_metrics(server: Any, kmock: Reviews) -> None:
    srv, _, _ = server
    assert (await _get(srv, None))[0] == 401
    assert (await _get(srv, "junk"))[0] == 401  # the API server does not authenticate it
    assert (await _get(srv, "bob-token"))[0] == 403  # authenticated, not allowed get /metrics
    status, text = await _get(srv, "prom-token")
    assert status == 200
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"smetric_epp_decisions", "inference_pool_ready_pods", "inference_model_request"} <= names
    sar = [body for kind, body in kmock.seen if kind == "subjectaccessreview"]
    assert sar[-1]["spec"]["user"] == PROMETHEUS
    assert sar[-1]["spec"]["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}


async def test_reviews_are_cached_for_the_ttl_and_the_cache_is_bounded(server: Any) -> None:
    srv, auth, clock = server
    for _ in range(3):
        assert (await _get(srv, "prom-token"))[0] == 200
    assert auth.reviews == 1  # one TokenReview for three scrapes within the TTL
    clock.now = 11.0
    assert (await _get(srv, "prom-token"))[0] == 200
    assert auth.reviews == 2  # reviewed again once the TTL is over
    for token in ("bob-token", "junk", "other"):
        await _get(srv, token)
    assert auth.cached() == 2  # max_cached: the oldest entries are dropped


async def test_a_silent_api_server_gives_503_within_the_timeout(server: Any) -> None:
    srv, auth, _ = server
    status, _ = await asyncio.wait_for(_get(srv, "slow-token"), 3.0)
    assert status == 503
    assert auth.cached() == 0  # an unanswered review is not cached


def test_the_operators_picker_leaves_metrics_open_for_its_monitors() -> None:
    """The operator's PodMonitor/ServiceMonitor scrape without a token: its picker is rendered with
    --metrics-endpoint-auth=false, and every rendered argument list resolves without a refusal."""
    from smetric.core.pickerflags import build_parser
    from smetric.epp.upstream.flags import resolve
    from tests.support.operator_render import VARIANTS, by_name, container, render

    for variant in VARIANTS.values():
        epp = container(by_name(render(variant), "Deployment", "p-epp"), "epp")
        resolved = resolve(build_parser().parse_args(epp["args"]))
        assert resolved.errors == () and resolved.metrics_auth is False


async def test_a_burst_of_unknown_tokens_sends_at_most_max_inflight_reviews(
    server: Any, kmock: Reviews
) -> None:
    srv, auth, _ = server
    auth.max_inflight = 3
    replies = await asyncio.wait_for(asyncio.gather(*(_get(srv, f"slow-{i}") for i in range(10))), 5.0)
    assert [status for status, _ in replies] == [503] * 10
    assert sum(1 for kind, _ in kmock.seen if kind == "tokenreview") == 3
