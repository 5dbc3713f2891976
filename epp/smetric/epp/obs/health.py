"""grpc.health.v1 for the picker, with the upstream picker's service names.

As upstream (GIE ``cmd/epp/runner/health.go``): ``liveness`` is SERVING once the process serves
(only a drain turns it off), so a pool whose engines are all loading or down never restarts the
picker; ``readiness``, ``inference-extension`` (the upstream chart's probe service), the ext_proc
service name and the overall status ``""`` are SERVING once endpoint discovery has synced (the
first complete listing of the pool and its pods; a static ``--endpoints`` list is synced at once),
whether or not any endpoint is ready (with none the picker answers 503). With leader election
(``is_leader``) they are SERVING on the leader only, as upstream; liveness stays SERVING. A
periodic task refreshes the states and the ready/stale and pool gauges. :func:`wait_serving` is
the client side: what launchers, benchmarks and tests use to wait for a picker to be ready.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from smetric.core.stopping import cancel_and_wait
from smetric.epp.contracts import EndpointSource
from smetric.epp.obs.metrics import PickerMetrics

EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
LIVENESS_SERVICE = "liveness"
READINESS_SERVICE = "readiness"
INFERENCE_EXTENSION_SERVICE = "inference-extension"
READY_SERVICES: tuple[str, ...] = ("", EXT_PROC_SERVICE, READINESS_SERVICE, INFERENCE_EXTENSION_SERVICE)
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class HealthReporter:
    def __init__(
        self,
        source: EndpointSource,
        metrics: PickerMetrics,
        is_stale: Callable[[str], bool],
        interval_s: float = 1.0,
        synced: Callable[[], bool] = lambda: True,
        is_leader: Callable[[], bool] | None = None,
    ) -> None:
        self.servicer = health.aio.HealthServicer()
        self._source = source
        self._metrics = metrics
        self._is_stale = is_stale
        self._synced = synced
        self._is_leader = is_leader  # --ha-enable-leader-election: only the leader is ready
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self._draining = False

    async def refresh(self) -> bool:
        endpoints = self._source.ready_endpoints()
        self._metrics.ready_endpoints.set(len(endpoints))
        self._metrics.stale_endpoints.set(sum(1 for e in endpoints if self._is_stale(e.address)))
        current = [
            (e, m) for e, m in ((e, self._source.metrics(e.address)) for e in endpoints) if m is not None
        ]
        scraped = [m for _, m in current]
        per_pod = {e.pod_name or e.address: m.waiting for e, m in current}
        self._metrics.upstream.pool(
            len(endpoints),
            [m.kv_usage for m in scraped],
            [m.waiting for m in scraped],
            [m.running for m in scraped],
            per_pod,
        )
        # llm-d-router: the pool's summary over the endpoints whose metrics are fresh
        fresh = [m for e, m in current if not self._is_stale(e.address)]
        self._metrics.llmd.pool(endpoints, fresh, current)
        ready = self._synced() and not self._draining and (self._is_leader is None or self._is_leader())
        for name in READY_SERVICES:
            await self.servicer.set(name, SERVING if ready else NOT_SERVING)
        await self.servicer.set(LIVENESS_SERVICE, NOT_SERVING if self._draining else SERVING)
        return ready

    async def _loop(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self._interval_s)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def drain(self) -> None:
        """Shutting down: report NOT_SERVING from now on."""
        self._draining = True
        await self.stop()
        await self.refresh()

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None


async def wait_serving(
    target: str, timeout_s: float, alive: Callable[[], None] | None = None, poll_s: float = 0.2
) -> None:
    """Poll ``grpc.health.v1.Health/Check`` (overall service) at ``target`` until SERVING.

    ``alive`` runs before every poll and may raise (the process being waited for has died).
    Raises :class:`TimeoutError` whose message is the last status seen ("no answer" if none).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last = "no answer"
    async with grpc.aio.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while loop.time() < deadline:
            if alive is not None:
                alive()
            try:
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
                if reply.status == SERVING:
                    return
                last = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            except grpc.aio.AioRpcError as exc:
                last = exc.code().name
            await asyncio.sleep(poll_s)
    raise TimeoutError(last)
