"""The picker's ``/metrics`` endpoint, authenticated and authorized as upstream's picker does it.

Upstream (GIE ``cmd/epp/runner``, ``--metrics-endpoint-auth``, default true) serves its metrics
through controller-runtime's ``filters.WithAuthenticationAndAuthorization``: the bearer token of
the request must pass a ``TokenReview`` and the user it names a ``SubjectAccessReview`` for verb
``get`` on the non-resource URL ``/metrics``. Prometheus then scrapes with a service-account token
whose role grants ``nonResourceURLs: [/metrics], verbs: [get]``.

Answers: no bearer token or a token the API server does not authenticate -> 401; authenticated
but not allowed -> 403; the API server unreachable, slower than ``timeout_s`` or answering
something that is not a review -> 503 (not cached), or at once when ``max_inflight`` reviews are already waiting (a burst of unknown tokens
does not become a burst of API calls). Results are cached by the token's SHA-256 for
``cache_ttl_s`` (at most ``max_cached`` entries, the oldest dropped first), so a scrape every few
seconds costs two API calls per TTL.
Needs RBAC: ``create`` on ``tokenreviews`` (authentication.k8s.io) and ``subjectaccessreviews``
(authorization.k8s.io), cluster-wide, as the upstream chart's ClusterRole grants.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Protocol

import aiohttp
from aiohttp import web
from kubernetes_asyncio import client
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

ClientFactory = Callable[[], Awaitable[client.ApiClient]]
OK, UNAUTHENTICATED, FORBIDDEN, UNAVAILABLE = 200, 401, 403, 503


class Authorizer(Protocol):
    async def check(self, token: str) -> int: ...


class KubeAuthorizer:
    """TokenReview + SubjectAccessReview through ``kubernetes_asyncio``, with a bounded TTL cache."""

    def __init__(
        self,
        api_client: ClientFactory,
        *,
        path: str = "/metrics",
        cache_ttl_s: float = 10.0,
        max_cached: int = 1024,
        timeout_s: float = 5.0,
        max_inflight: int = 8,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._factory = api_client
        self._api: client.ApiClient | None = None
        self.path = path
        self.cache_ttl_s = cache_ttl_s
        self.max_cached = max_cached
        self.timeout_s = timeout_s
        self._clock = clock
        self._cache: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self.reviews = 0  # TokenReviews sent (what the cache saves)
        self.max_inflight = max_inflight
        self._inflight = 0

    async def check(self, token: str) -> int:
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self._clock()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        if self._inflight >= self.max_inflight:  # uncached tokens must not flood the API server
            return UNAVAILABLE
        self._inflight += 1
        try:
            status = await asyncio.wait_for(self._review(token), self.timeout_s)
        except (TimeoutError, client.ApiException, aiohttp.ClientError, OSError, ValueError) as exc:
            log.warning("metrics auth: the API server did not answer the review: %s", exc)
            return UNAVAILABLE
        finally:
            self._inflight -= 1
        self._cache[key] = (now + self.cache_ttl_s, status)
        self._cache.move_to_end(key)
        while len(self._cache) > self.max_cached:
            self._cache.popitem(last=False)
        return status

    def cached(self) -> int:
        return len(self._cache)

    async def _review(self, token: str) -> int:
        if self._api is None:
            self._api = await self._factory()
        self.reviews += 1
        review = await client.AuthenticationV1Api(self._api).create_token_review(
            client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token))
        )
        status = review.status
        if status is None or not status.authenticated or status.user is None:
            return UNAUTHENTICATED
        user = status.user
        sar = await client.AuthorizationV1Api(self._api).create_subject_access_review(
            client.V1SubjectAccessReview(
                spec=client.V1SubjectAccessReviewSpec(
                    user=user.username,
                    uid=user.uid,
                    groups=user.groups,
                    extra=user.extra,
                    non_resource_attributes=client.V1NonResourceAttributes(path=self.path, verb="get"),
                )
            )
        )
        return OK if sar.status is not None and sar.status.allowed else FORBIDDEN

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
            self._api = None


class MetricsServer:
    """``GET /metrics`` (the Prometheus text format) on its own port; ``authorizer`` ``None`` = open."""

    def __init__(
        self, registry: CollectorRegistry, host: str, port: int, authorizer: Authorizer | None = None
    ) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self.authorizer = authorizer
        self._runner: web.AppRunner | None = None

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        if self.authorizer is not None:
            header = request.headers.get("Authorization", "")
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                return web.Response(status=UNAUTHENTICATED, text="Unauthorized: a bearer token is required\n")
            status = await self.authorizer.check(token.strip())
            if status != OK:
                text = {UNAUTHENTICATED: "Unauthorized", FORBIDDEN: "Forbidden"}.get(status, "Unavailable")
                return web.Response(status=status, text=f"{text}\n")
        # rendered on a worker thread, as prometheus_client's own exporter does: the event loop
        # keeps serving ext_proc streams while a large registry is formatted
        body = await asyncio.to_thread(generate_latest, self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise OSError(
                exc.errno, f"metrics server cannot listen on {self.host}:{self.port}: {exc}"
            ) from None
        self._runner = runner
        server = site._server
        sockets = getattr(server, "sockets", None) or ()
        if self.port == 0 and sockets:
            self.port = int(sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
