"""``--ha-enable-leader-election``: one active picker among the replicas, through a Lease.

As upstream (llm-d-router v0.9.0 and v0.10.0 ``pkg/epp/server/controller_manager.go`` 109-116:
controller-runtime leader election on a ``coordination.k8s.io/v1`` Lease named
``epp-<namespace>-<pool>.llm-d.ai`` in the pool's namespace, released on cancel; GIE's
``cmd/epp/runner/health.go``: only the leader reports ``readiness`` SERVING, ``liveness`` is
always SERVING), with client-go's timing defaults (lease 15 s, renew deadline 10 s, retry every
2 s). The same Lease name means an llm-d-router picker and this one never lead one pool at once.
GIE's own picker names its Lease ``epp-<namespace>-<pool>.gateway-api-inference-extension.sigs
.k8s.io`` (GIE v1.5.0 controller_manager.go): no shared Lease with it, so a migration from GIE's
picker stops it first (docs/picker.md, "Leader election").

The algorithm is client-go's ``leaderelection``: every ``retry_s`` a replica reads the Lease. It
takes the Lease when it is absent, released (no holder) or expired -- no renewal *observed* for
``lease_s`` on this replica's own clock, so clock skew between nodes does not matter -- and the
leader renews it. Writes are patches that carry the read ``resourceVersion`` (a precondition the
API server checks): of two replicas racing for one Lease it accepts one write and answers the
other 409. A leader that cannot renew for
``renew_deadline_s`` (API server unreachable, Lease taken) steps down at once, before its Lease
can expire for the others. Non-leaders keep discovering and scraping the pool (a warm standby:
failover costs the election, not a cold start) and answer ext_proc requests that still reach them.
Needs RBAC: get/create/update on ``leases`` in the namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

log = logging.getLogger(__name__)

ClientFactory = Callable[[], Awaitable[client.ApiClient]]


def lease_name(namespace: str, pool: str) -> str:
    """llm-d-router's Lease name (v0.10.0 pkg/epp/server/controller_manager.go 113), so its picker
    and this one never lead the same pool at once."""
    return f"epp-{namespace}-{pool}.llm-d.ai"


def default_identity() -> str:
    """controller-runtime's: the pod's host name and a random suffix."""
    host = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{host}_{uuid.uuid4()}"


def _now_utc() -> datetime.datetime:
    return datetime.datetime.now(tz=datetime.UTC)


class LeaderElector:
    def __init__(
        self,
        api_client: ClientFactory,
        namespace: str,
        name: str,
        identity: str | None = None,
        *,
        lease_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < retry_s < renew_deadline_s < lease_s:
            raise ValueError("leader election needs 0 < retry < renew deadline < lease duration")
        self._factory = api_client
        self._api: client.ApiClient | None = None
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.lease_s = lease_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_s = retry_s
        self._clock = clock
        self._leader = False
        self._last_renew = 0.0  # clock() of the leader's last successful write
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0  # clock() when that record was first seen
        self._task: asyncio.Task[None] | None = None
        self.transitions = 0  # times this replica became the leader
        self.changed = asyncio.Event()  # set on every change of leadership

    @property
    def is_leader(self) -> bool:
        return self._leader

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self, release: bool = True) -> None:
        """Stop electing; a leader releases the Lease (``release``) so a standby takes over at its
        next retry instead of after the lease duration."""
        if self._task is not None:
            # Cancel until it ends, each wait bounded: Python 3.11's asyncio.wait_for can swallow a
            # cancellation that lands as its inner call completes, and a single cancel then left
            # stop() waiting forever on a task that kept running (seen once in the unit suite).
            task = self._task
            for _ in range(100):
                task.cancel()
                done, _pending = await asyncio.wait({task}, timeout=self.retry_s)
                if done:
                    break
            self._task = None
        if release and self._leader:
            with contextlib.suppress(ApiException, OSError, TimeoutError):
                await asyncio.wait_for(self._release(), self.retry_s)
        self._set_leader(False)
        if self._api is not None:
            await self._api.close()
            self._api = None

    async def _run(self) -> None:
        while True:
            try:
                async with asyncio.timeout(self.retry_s):  # unlike wait_for, never eats a cancel
                    await self.try_acquire_or_renew()
            except (ApiException, OSError, TimeoutError, ValueError) as exc:
                log.warning("leader election: lease %s/%s: %s", self.namespace, self.name, exc)
            if self._leader and self._clock() - self._last_renew > self.renew_deadline_s:
                log.warning(
                    "leader election: could not renew for %.1f s; stepping down", self.renew_deadline_s
                )
                self._set_leader(False)
            await asyncio.sleep(self.retry_s)

    async def _coordination(self) -> client.CoordinationV1Api:
        if self._api is None:
            self._api = await self._factory()
        return client.CoordinationV1Api(self._api)

    async def try_acquire_or_renew(self) -> bool:
        """One round: read the Lease, take or renew it when allowed. Returns leadership."""
        api = await self._coordination()
        now = _now_utc()
        try:
            lease = await api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = self._lease_body(now, acquire=now, transitions=0, resource_version=None)
            try:
                await api.create_namespaced_lease(self.namespace, body)
            except ApiException as create_exc:
                if create_exc.status == 409:  # another replica created it first
                    return self._leader
                raise
            return self._won()
        spec = lease.spec or client.V1LeaseSpec()
        holder = spec.holder_identity or ""
        record = (holder, str(spec.renew_time))
        if record != self._observed:
            self._observed, self._observed_at = record, self._clock()
        if holder and holder != self.identity:
            expired = self._clock() - self._observed_at > (spec.lease_duration_seconds or self.lease_s)
            if not expired:
                self._set_leader(False)
                return False
        ours = holder == self.identity
        transitions = (spec.lease_transitions or 0) + (0 if ours else 1)
        acquire = spec.acquire_time if ours and spec.acquire_time else now
        body = self._lease_body(now, acquire, transitions, lease.metadata.resource_version)
        try:
            await api.patch_namespaced_lease(self.name, self.namespace, body)
        except ApiException as exc:
            if exc.status == 409:  # the Lease changed since it was read: someone else wrote it
                return self._leader
            raise
        return self._won()

    def _won(self) -> bool:
        self._last_renew = self._clock()
        self._observed = None
        self._set_leader(True)
        return True

    def _lease_body(
        self,
        now: datetime.datetime,
        acquire: datetime.datetime,
        transitions: int,
        resource_version: str | None,
        holder: str | None = None,
        lease_s: int | None = None,
    ) -> client.V1Lease:
        return client.V1Lease(
            api_version="coordination.k8s.io/v1",
            kind="Lease",
            metadata=client.V1ObjectMeta(
                name=self.name, namespace=self.namespace, resource_version=resource_version
            ),
            spec=client.V1LeaseSpec(
                holder_identity=self.identity if holder is None else holder,
                lease_duration_seconds=lease_s or max(1, round(self.lease_s)),
                acquire_time=acquire,
                renew_time=now,
                lease_transitions=transitions,
            ),
        )

    async def _release(self) -> None:
        api = await self._coordination()
        lease = await api.read_namespaced_lease(self.name, self.namespace)
        if lease.spec is None or lease.spec.holder_identity != self.identity:
            return
        now = _now_utc()
        transitions = lease.spec.lease_transitions or 0
        body = self._lease_body(now, now, transitions, lease.metadata.resource_version, holder="", lease_s=1)
        await api.patch_namespaced_lease(self.name, self.namespace, body)

    def _set_leader(self, leader: bool) -> None:
        if leader == self._leader:
            return
        self._leader = leader
        if leader:
            self.transitions += 1
            log.info("leader election: this replica (%s) is now the leader", self.identity)
        else:
            log.info("leader election: this replica (%s) is not the leader", self.identity)
        self.changed.set()
