"""Pure renderer: an SMetricPool (identity + typed spec) -> the complete list of child manifests.

No cluster access; ``smetric-operator render FILE`` and the controller share this function, so
what the CLI prints is exactly what the operator applies.
"""

from __future__ import annotations

from typing import Any

from smetric.operator.meta import Manifest, PoolRef, stamp_hash
from smetric.operator.render_client_limits import client_limits
from smetric.operator.render_engine import engine_deployments, pod_disruption_budgets
from smetric.operator.render_gateway import http_route, inference_pool, provider_objects
from smetric.operator.render_kv import mooncake_master
from smetric.operator.render_monitors import pod_monitors
from smetric.operator.render_netpol import network_policies
from smetric.operator.render_picker import picker
from smetric.operator.render_timeouts import gateway_timeouts
from smetric.operator.spec import SMetricPoolSpec, parse_spec


def render_children(pool: PoolRef, spec: SMetricPoolSpec) -> list[Manifest]:
    """All children in apply order (config and RBAC before the workloads that use them)."""
    children: list[Manifest] = []
    if spec.global_kv.enabled:
        children += mooncake_master(pool, spec)
    children += picker(pool, spec)
    children += engine_deployments(pool, spec)
    children += pod_disruption_budgets(pool, spec)
    children += network_policies(pool, spec)
    children.append(inference_pool(pool, spec))
    route = http_route(pool, spec)
    if route is not None:
        children.append(route)
    children += provider_objects(pool, spec)
    children += gateway_timeouts(pool, spec)
    children += client_limits(pool, spec)
    children += pod_monitors(pool, spec)
    return [stamp_hash(child) for child in children]


def render_resource(resource: dict[str, Any], default_namespace: str = "default") -> list[Manifest]:
    """Render from a whole SMetricPool object (as read from a file or the API server).

    Raises :class:`smetric.operator.spec.InvalidSpecError` for an invalid spec, ``ValueError``
    for an object that is not an SMetricPool.
    """
    if resource.get("kind") != "SMetricPool":
        raise ValueError(f"expected kind SMetricPool, got {resource.get('kind')!r}")
    meta = resource.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("SMetricPool needs metadata.name")
    pool = PoolRef(name=name, namespace=meta.get("namespace") or default_namespace, uid=meta.get("uid"))
    return render_children(pool, parse_spec(resource.get("spec")))
