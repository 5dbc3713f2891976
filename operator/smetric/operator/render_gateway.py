"""Gateway API objects: the InferencePool (v1) that names the picker, and the HTTPRoute to it."""

from __future__ import annotations

from typing import Any

from smetric.operator.meta import (
    COMPONENT_LABEL,
    MODEL_SERVER,
    POOL_LABEL,
    ROUTING,
    Manifest,
    PoolRef,
    metadata,
)
from smetric.operator.render_engine import ENGINE_PORT
from smetric.operator.render_picker import GRPC_PORT
from smetric.operator.spec import SMetricPoolSpec

INFERENCE_GROUP = "inference.networking.k8s.io"
GATEWAY_GROUP = "gateway.networking.k8s.io"


def pool_selector(pool: PoolRef) -> dict[str, str]:
    """Labels that select every model-server pod of the pool (all roles)."""
    return {POOL_LABEL: pool.name, COMPONENT_LABEL: MODEL_SERVER}


def inference_pool(pool: PoolRef, spec: SMetricPoolSpec) -> Manifest:
    return {
        "apiVersion": f"{INFERENCE_GROUP}/v1",
        "kind": "InferencePool",
        "metadata": metadata(pool, pool.name, ROUTING),
        "spec": {
            "selector": {"matchLabels": pool_selector(pool)},
            "targetPorts": [{"number": ENGINE_PORT}],
            "appProtocol": "http",
            "endpointPickerRef": {
                "group": "",
                "kind": "Service",
                "name": pool.epp_name,
                "port": {"number": GRPC_PORT},
                "failureMode": spec.router.failure_mode,
            },
        },
    }


def http_route(pool: PoolRef, spec: SMetricPoolSpec) -> Manifest | None:
    gateway = spec.gateway
    if gateway is None:
        return None
    parent: dict[str, Any] = {"group": GATEWAY_GROUP, "kind": "Gateway", "name": gateway.parent_ref.name}
    if gateway.parent_ref.namespace:
        parent["namespace"] = gateway.parent_ref.namespace
    route_spec: dict[str, Any] = {
        "parentRefs": [parent],
        "rules": [
            {
                "matches": [{"path": {"type": "PathPrefix", "value": gateway.path}}],
                "backendRefs": [{"group": INFERENCE_GROUP, "kind": "InferencePool", "name": pool.name}],
                # Agent turns can stream for minutes: no route-level request timeout.
                "timeouts": {"request": "0s"},
            }
        ],
    }
    if gateway.hostnames:
        route_spec["hostnames"] = list(gateway.hostnames)
    return {
        "apiVersion": f"{GATEWAY_GROUP}/v1",
        "kind": "HTTPRoute",
        "metadata": metadata(pool, pool.name, ROUTING),
        "spec": route_spec,
    }
