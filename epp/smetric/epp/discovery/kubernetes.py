"""Kubernetes discovery: watch one InferencePool v1 and the pods it selects (``kubernetes_asyncio``).

Two loops, each LIST (replacing the known state) then WATCH from the list's resourceVersion with a
server-side timeout of ``resync_s``; when the watch ends (timeout, 410 Gone, dropped connection,
API error) the loop lists again, so missed events heal within ``resync_s`` (after ``retry_s`` on
errors). The pod loop restarts when the pool's selector changes. The endpoint set is pushed to the
callback whenever it changes; a missing or unusable pool yields no endpoints (the picker answers 503).
Needs RBAC: get/list/watch on pods and inferencepools in the namespace.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from smetric.core.stopping import cancel_and_wait
from smetric.epp.contracts import EndpointInfo
from smetric.epp.discovery.base import OnEndpoints
from smetric.epp.discovery.pool import (
    GROUP,
    PLURAL,
    VERSION,
    PoolSpec,
    PoolSpecError,
    label_selector,
    pool_endpoints,
)

log = logging.getLogger(__name__)

ClientFactory = Callable[[], Awaitable[client.ApiClient]]
MAX_RETRY_S = 30.0


async def default_api_client() -> client.ApiClient:
    """In-cluster service-account config inside a pod, else the local kubeconfig: ``$KUBECONFIG``
    as it is now (``--kubeconfig`` sets it after the client library read its default at import),
    then ``~/.kube/config``."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
    else:
        await config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
    return client.ApiClient()


class KubeDiscovery:
    def __init__(
        self,
        pool_name: str,
        namespace: str = "default",
        kv_events_port: int = 5557,
        api_client: ClientFactory = default_api_client,
        resync_s: int = 300,
        retry_s: float = 2.0,
    ) -> None:
        if not pool_name:
            raise ValueError("pool_name is required")
        self.pool_name = pool_name
        self.namespace = namespace
        self._kv_port = kv_events_port
        self._client_factory = api_client
        self._resync_s = resync_s
        self._retry_s = retry_s
        self._api: client.ApiClient | None = None
        self._spec: PoolSpec | None = None
        self._pods: dict[str, Mapping[str, Any]] = {}
        self._endpoints: tuple[EndpointInfo, ...] = ()
        self._on_change: OnEndpoints | None = None
        self._selector_changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._listed: set[str] = set()  # which of the two listings has completed at least once

    @property
    def synced(self) -> bool:
        """True once the pool and its pods have each been listed successfully (readiness)."""
        return {"pool", "pods"} <= self._listed

    @property
    def endpoints(self) -> tuple[EndpointInfo, ...]:
        return self._endpoints

    async def start(self, on_change: OnEndpoints) -> None:
        self._on_change = on_change
        self._api = await self._client_factory()
        pool_rv: str | None = None
        pods_rv: str | None = None
        try:
            pool_rv = await self._list_pool()
            self._listed.add("pool")
            pods_rv = await self._list_pods()
            self._listed.add("pods")
        except Exception as exc:  # the loops below retry; start with what we have
            log.warning("initial listing of pool %s/%s failed: %s", self.namespace, self.pool_name, exc)
        self._publish(force=True)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._loop(self._list_pool, self._watch_pool, pool_rv), name="k8s-pool"),
            loop.create_task(self._loop(self._list_pods, self._watch_pods, pods_rv), name="k8s-pods"),
        ]

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks)
        self._tasks = []
        if self._api is not None:
            await self._api.close()
            self._api = None

    # -- state -------------------------------------------------------------------------------

    def _set_pool(self, pool: Mapping[str, Any] | None) -> None:
        old = self._spec.match_labels if self._spec else None
        try:
            self._spec = PoolSpec.from_pool(pool) if pool is not None else None
        except PoolSpecError as exc:
            log.error("%s", exc)
            self._spec = None
        if (self._spec.match_labels if self._spec else None) != old:
            self._selector_changed.set()

    def _publish(self, force: bool = False) -> None:
        eps = pool_endpoints(self._spec, self._pods.values(), self._kv_port) if self._spec else ()
        if (force or eps != self._endpoints) and self._on_change is not None:
            log.info("pool %s/%s: %d ready endpoints", self.namespace, self.pool_name, len(eps))
            self._endpoints = eps
            self._on_change(eps)

    # -- list + watch ------------------------------------------------------------------------

    async def _loop(
        self,
        lister: Callable[[], Awaitable[str]],
        watcher: Callable[[str], Awaitable[None]],
        rv: str | None,
    ) -> None:
        """``rv`` is the resourceVersion of the listing ``start()`` made (``None``: list first).

        Failures back off exponentially from ``retry_s`` to ``MAX_RETRY_S``; a warning is logged on
        the first failure of a streak, later ones at debug level (no log flood while RBAC is wrong).
        """
        failures = 0
        while True:
            try:
                if rv is None:
                    rv = await lister()
                    self._listed.add("pool" if lister == self._list_pool else "pods")
                    self._publish()
                failures = 0
                await watcher(rv)
                rv = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # API errors, dropped connections: relist after a pause
                level = logging.WARNING if failures == 0 else logging.DEBUG
                log.log(
                    level, "watch in %s failed (%s: %s); relisting", self.namespace, type(exc).__name__, exc
                )
                rv = None
                await asyncio.sleep(min(self._retry_s * 2**failures, MAX_RETRY_S))
                failures += 1

    def _custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self._api)

    def _core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self._api)

    async def _list_pool(self) -> str:
        try:
            pool = await self._custom().get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, self.pool_name
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            log.warning("InferencePool %s/%s not found", self.namespace, self.pool_name)
            pool = None
        self._set_pool(pool)
        meta = (pool or {}).get("metadata") or {}
        return str(meta.get("resourceVersion", ""))

    async def _watch_pool(self, rv: str) -> None:
        kwargs: dict[str, Any] = {
            "timeout_seconds": self._resync_s,
            "field_selector": f"metadata.name={self.pool_name}",
        }
        if rv:
            kwargs["resource_version"] = rv
        async with watch.Watch() as w:
            stream = w.stream(
                self._custom().list_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURAL, **kwargs
            )
            async for event in stream:
                obj = event["raw_object"]
                if (obj.get("metadata") or {}).get("name") != self.pool_name:
                    continue
                self._set_pool(None if event["type"] == "DELETED" else obj)
                self._publish()

    async def _list_pods(self) -> str:
        self._selector_changed.clear()
        if self._spec is None:
            self._pods = {}
            return ""
        resp: Any = await self._core().list_namespaced_pod(
            self.namespace, label_selector=label_selector(self._spec.match_labels), _preload_content=False
        )
        data = await resp.json()
        self._pods = {p["metadata"]["name"]: p for p in data.get("items") or () if p.get("metadata")}
        return str((data.get("metadata") or {}).get("resourceVersion", ""))

    async def _watch_pods(self, rv: str) -> None:
        if self._spec is None:
            await self._selector_changed.wait()
            return
        changed = asyncio.ensure_future(self._selector_changed.wait())
        consume = asyncio.ensure_future(self._consume_pods(label_selector(self._spec.match_labels), rv))
        try:
            await asyncio.wait({changed, consume}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (changed, consume):
                task.cancel()
            await asyncio.gather(changed, consume, return_exceptions=True)
        if consume.done() and not consume.cancelled() and consume.exception() is not None:
            raise consume.exception()  # type: ignore[misc]

    async def _consume_pods(self, selector: str, rv: str) -> None:
        kwargs: dict[str, Any] = {"label_selector": selector, "timeout_seconds": self._resync_s}
        if rv:
            kwargs["resource_version"] = rv
        async with watch.Watch() as w:
            async for event in w.stream(self._core().list_namespaced_pod, self.namespace, **kwargs):
                pod = event["raw_object"]
                name = (pod.get("metadata") or {}).get("name")
                if not name:
                    continue
                if event["type"] == "DELETED":
                    self._pods.pop(name, None)
                else:
                    self._pods[name] = pod
                self._publish()
