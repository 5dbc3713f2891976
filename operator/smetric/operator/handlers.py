"""kopf wiring: a registry whose handlers all funnel into :func:`reconcile` (one lock per pool).

No finalizers: children carry ownerReferences, so deleting a pool lets the garbage collector
remove them; the operator registers no deletion handlers, daemons or timers (kopf would add a
finalizer for those). Drift is caught by watching the children themselves: any event on an
object labelled ``app.kubernetes.io/managed-by=smetric-operator`` reconciles its pool.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import kopf

from smetric.operator.client import CHILD_KINDS, ApiError, Credentials, KubeClient
from smetric.operator.meta import (
    API_VERSION,
    FIELD_MANAGER,
    GROUP,
    KIND,
    MANAGED_BY_LABEL,
    PLURAL,
    POOL_LABEL,
    VERSION,
)
from smetric.operator.reconcile import ChildApplyError, ChildNotOwnedError, reconcile

NOT_OWNED_RETRY_S = 60  # a pool blocked by someone else's object looks again this often


@dataclass
class OperatorState:
    """Per-operator state (owned by one registry, never module-global)."""

    api_server: str | None = None
    credentials: Credentials | None = None
    locks: defaultdict[tuple[str, str], asyncio.Lock] = field(
        default_factory=lambda: defaultdict(asyncio.Lock)
    )
    queued: set[tuple[str, str]] = field(default_factory=set)  # pools with a child-event reconcile waiting

    def client(self) -> KubeClient:
        if self.credentials is None:
            raise kopf.TemporaryError("not logged in to the Kubernetes API yet", delay=1)
        return KubeClient(self.credentials)


def configure(settings: kopf.OperatorSettings) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="smetric.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="smetric.io", key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING  # k8s Events only for warnings and errors
    settings.watching.server_timeout = 300
    # The children's list/watch requests carry labelSelector=app.kubernetes.io/managed-by=smetric-operator:
    # the API server sends only this operator's objects. A handler's ``labels=`` filter is applied
    # by kopf client-side after every object of the kind has been streamed (kopf 1.45
    # _cogs/clients/watching.py watch_objs and fetching.py list_objs send only
    # settings.watching.label_selectors); the handlers keep theirs as a second check.
    settings.watching.label_selectors[is_child_resource] = CHILD_SELECTOR


CHILD_SELECTOR = f"{MANAGED_BY_LABEL}={FIELD_MANAGER}"
_CHILD_RESOURCES = frozenset(
    (api_version.rpartition("/")[0], api_version.rpartition("/")[2], kind)
    for api_version, kind in CHILD_KINDS
)


def is_child_resource(resource: kopf.Resource) -> bool:
    """A kind the operator renders (client.CHILD_KINDS), as kopf discovered it."""
    return (resource.group, resource.version, resource.kind) in _CHILD_RESOURCES


def build_registry(state: OperatorState) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def _startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings)

    @kopf.on.login(registry=registry)
    def _login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        info: kopf.ConnectionInfo | None
        if state.api_server:  # e.g. `kubectl proxy` or a test API server: no credentials needed
            info = kopf.ConnectionInfo(server=state.api_server)
        else:
            info = kopf.login_via_client(**kwargs)
        if info is not None:
            state.credentials = Credentials.from_kopf(info)
        return info

    async def _reconcile(api: KubeClient, body: Any, logger: Any) -> None:
        try:
            await reconcile(api, body, logger)
        except ChildNotOwnedError as exc:  # someone else's object: look again in a minute, not in 5 s
            raise kopf.TemporaryError(str(exc), delay=NOT_OWNED_RETRY_S) from exc
        except (ApiError, ChildApplyError) as exc:  # transient API trouble: kopf retries with backoff
            raise kopf.TemporaryError(str(exc), delay=5) from exc

    async def _reconcile_latest(namespace: str, name: str, logger: Any) -> None:
        """Reconcile the pool as it is now (an event's body may already be stale), under its lock."""
        async with state.locks[(namespace, name)], state.client() as api:
            state.queued.discard((namespace, name))  # later child events need a fresh pass
            try:
                pool = await api.get(API_VERSION, KIND, namespace, name)
            except ApiError as exc:
                raise kopf.TemporaryError(str(exc), delay=5) from exc
            if pool is None or (pool.get("metadata") or {}).get("deletionTimestamp"):
                return  # pool gone: the garbage collector removes the children
            await _reconcile(api, pool, logger)

    @kopf.on.resume(GROUP, VERSION, PLURAL, registry=registry)
    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry)
    @kopf.on.update(GROUP, VERSION, PLURAL, registry=registry)
    async def _pool_changed(name: str, namespace: str | None, logger: Any, **_: Any) -> None:
        if namespace:  # SMetricPool is namespaced; guards the type only
            await _reconcile_latest(namespace, name, logger)

    async def _child_event(namespace: str | None, labels: kopf.Labels, logger: Any, **_: Any) -> None:
        pool_name = labels.get(POOL_LABEL)
        if not pool_name or not namespace:
            return
        key = (namespace, pool_name)
        if key in state.queued:
            return  # a burst of child events (e.g. a rollout) coalesces into one pending reconcile
        state.queued.add(key)
        try:
            await _reconcile_latest(namespace, pool_name, logger)
        except kopf.TemporaryError as exc:  # not retried: the next event reconciles
            logger.warning(
                "reconcile of SMetricPool %s/%s after a child event failed: %s", namespace, pool_name, exc
            )

    for api_version, kind in CHILD_KINDS:
        group, _, version = api_version.rpartition("/")
        kopf.on.event(  # kopf discovers the plural; an unserved kind (CRD absent) is skipped
            group=group,
            version=version,
            kind=kind,
            labels={MANAGED_BY_LABEL: FIELD_MANAGER},
            registry=registry,
            id=f"child-{kind.lower()}",
        )(_child_event)
    return registry
