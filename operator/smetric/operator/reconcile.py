"""One reconciliation of an SMetricPool: render, apply what changed, prune leftovers, write status.

Idempotent and level-triggered: create, update, resume and any child event all run the same
function, so the result converges whatever the starting state (missing children are re-created,
children whose rendered manifest changed are re-applied, children no longer rendered are deleted).
An object of a child's name that the pool does not own is left alone unless ``adoptExisting``
(``ownership``); the Degraded condition (reason NotOwned) names it and its holder.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from smetric.operator.advice import deprecation_warnings
from smetric.operator.client import CHILD_KINDS, ApiError, KubeClient
from smetric.operator.meta import (
    API_VERSION,
    FIELD_MANAGER,
    KIND,
    MANAGED_BY_LABEL,
    POOL_LABEL,
    SPEC_HASH_ANNOTATION,
    Manifest,
    PoolRef,
    key_of,
)
from smetric.operator.ownership import not_owned_message, owned_by
from smetric.operator.render import render_children
from smetric.operator.render_client_limits import client_limit_warnings
from smetric.operator.routes import route_conflicts
from smetric.operator.spec import InvalidSpecError, parse_spec
from smetric.operator.status import invalid_status, now_rfc3339, pool_status


class ChildApplyError(RuntimeError):
    """Some children could not be applied (the others were); the status says which."""


class ChildNotOwnedError(ChildApplyError):
    """Some children were not applied because objects of their names belong to someone else."""


@dataclass(frozen=True, slots=True)
class Outcome:
    applied: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    status: Mapping[str, Any] = field(default_factory=dict)
    invalid: str | None = None


def _hash(obj: Manifest | None) -> str | None:
    if obj is None:
        return None
    value = (obj.get("metadata", {}).get("annotations") or {}).get(SPEC_HASH_ANNOTATION)
    return value if isinstance(value, str) else None


async def reconcile(
    api: KubeClient, body: Mapping[str, Any], log: logging.Logger | logging.LoggerAdapter[Any]
) -> Outcome:
    meta = body["metadata"]
    pool = PoolRef(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])
    generation = int(meta.get("generation") or 0)
    old_status: Mapping[str, Any] = body.get("status") or {}
    previous = old_status.get("conditions") or []
    try:
        spec = parse_spec(body.get("spec"))
    except InvalidSpecError as exc:
        status = invalid_status(str(exc), generation, previous, now_rfc3339())
        if status != dict(old_status):
            await api.patch_status(API_VERSION, KIND, pool.namespace, pool.name, status)
        log.warning("SMetricPool %s/%s: invalid spec, nothing applied: %s", pool.namespace, pool.name, exc)
        return Outcome(status=status, invalid=str(exc))
    for warning in [
        *deprecation_warnings(f"{pool.namespace}/{pool.name}", spec),
        *client_limit_warnings(f"{pool.namespace}/{pool.name}", pool.namespace, spec),
    ]:
        log.warning("%s", warning)  # a Kubernetes Event on the pool (kopf posts warnings)

    rendered = render_children(pool, spec)
    selector = f"{POOL_LABEL}={pool.name},{MANAGED_BY_LABEL}={FIELD_MANAGER}"
    live: dict[tuple[str, str, str], Manifest] = {}
    for api_version, kind in CHILD_KINDS:
        for obj in await api.list(api_version, kind, pool.namespace, selector):
            if owned_by(obj, pool.uid or ""):
                live[key_of(obj)] = obj

    applied: list[str] = []
    failed: list[str] = []
    not_owned: list[str] = []
    observed: dict[str, Manifest | None] = {}
    gateway_objects: dict[str, Manifest | None] = {}
    for child in rendered:
        key = key_of(child)
        current = live.get(key)
        if current is None:  # absent, or an object of that name that is not (yet) this pool's
            try:
                existing = await api.get(key[0], key[1], pool.namespace, key[2])
            except ApiError as exc:
                failed.append(f"{key[1]}/{key[2]}: {exc}")
                continue
            if existing is not None and not owned_by(existing, pool.uid or "") and not spec.adopt_existing:
                not_owned.append(not_owned_message(key[1], key[2], existing))
                continue  # never applied with force over someone else's object
        if current is None or _hash(current) != _hash(child):
            try:  # one failing child (e.g. its CRD is not installed) does not block the others
                current = await api.apply(child)
                applied.append(f"{key[1]}/{key[2]}")
            except ApiError as exc:
                failed.append(f"{key[1]}/{key[2]}: {exc}")
        if key[1] == "Deployment":
            observed[key[2]] = current
        elif key[1] in ("InferencePool", "HTTPRoute"):  # status.parents written by the gateway
            gateway_objects[key[1]] = current

    wanted = {key_of(child) for child in rendered}
    deleted: list[str] = []
    for key in sorted(set(live) - wanted):
        await api.delete(key[0], key[1], pool.namespace, key[2])
        deleted.append(f"{key[1]}/{key[2]}")

    has_route = any(child["kind"] == "HTTPRoute" for child in rendered)
    conflicts: list[str] = []
    if has_route:  # another pool's route on the same Gateway and path would take this one's traffic
        others = await api.list(API_VERSION, KIND, pool.namespace, "")
        conflicts = route_conflicts(pool.name, pool.namespace, spec, others)
    status = pool_status(
        pool.name,
        rendered,
        observed,
        generation,
        previous,
        now_rfc3339(),
        failed,
        gateway=gateway_objects if has_route else None,
        gateway_name=spec.gateway.parent_ref.name if spec.gateway is not None else None,
        route_conflicts=conflicts,
        not_owned=not_owned,
        leader_elected=(pool.epp_name,) if spec.router.leader_election else (),
    )
    if status != dict(old_status):
        await api.patch_status(API_VERSION, KIND, pool.namespace, pool.name, status)
    if applied or deleted:
        log.info("SMetricPool %s/%s: applied %s; deleted %s", pool.namespace, pool.name, applied, deleted)
    if failed:  # surfaced in status; raised so the caller retries with backoff
        raise ChildApplyError(f"SMetricPool {pool.namespace}/{pool.name}: " + "; ".join(failed))
    if not_owned:  # surfaced in status; raised so the caller looks again later (the holder may go)
        raise ChildNotOwnedError(f"SMetricPool {pool.namespace}/{pool.name}: " + "; ".join(not_owned))
    return Outcome(applied=tuple(applied), deleted=tuple(deleted), status=status)
