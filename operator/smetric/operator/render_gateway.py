"""Gateway API objects: the InferencePool (v1) that names the picker, the HTTPRoute to it, and the
objects a gateway implementation needs (``gateway.provider``), as GIE's inferencepool chart renders
them (config/charts/inferencepool/templates/istio.yaml, gke.yaml):

* ``istio``: a ``DestinationRule`` for the picker Service with ``tls.mode: SIMPLE`` and
  ``insecureSkipVerify`` (the picker's certificate is self-signed unless ``router.certSecretName``).
* ``gke``: ``HealthCheckPolicy`` (HTTP ``/health`` on the target port) and ``GCPBackendPolicy``
  (backend timeout: the whole response, ``render_timeouts.pool_timeouts(spec).route_s``) targeting
  the InferencePool.
* ``kgateway``, ``envoy-gateway``: nothing beyond the InferencePool and HTTPRoute (kgateway connects
  to the picker with TLS, skipping verification: GIE PR #1085 guidance; for a gateway that speaks
  plaintext h2c set ``router.secureServing: false``).

The timeouts (HTTPRoute ``timeouts.request``, GKE ``timeoutSec``, Envoy Gateway's
BackendTrafficPolicy) are derived from the pool's longest prefill: :mod:`smetric.operator.render_timeouts`.
The slow-client bounds of ``gateway.clientLimits`` (Envoy Gateway ClientTrafficPolicy, Istio
EnvoyFilter) are rendered by :mod:`smetric.operator.render_client_limits`.
"""

from __future__ import annotations

from typing import Any

from smetric.core.gatewaytimeouts import whole_seconds
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
from smetric.operator.render_timeouts import duration, pool_timeouts
from smetric.operator.spec import SMetricPoolSpec

INFERENCE_GROUP = "inference.networking.k8s.io"
GATEWAY_GROUP = "gateway.networking.k8s.io"
# Header GIE's body-based routing (BBR) extension sets from the request body's `model`.
MODEL_HEADER = "X-Gateway-Model-Name"


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
            # InferencePool v1 as of GIE v1.0.0 (docs/deploy.md pins it): no ``appProtocol``
            # (added in v1.4.0; the model servers speak HTTP/1.1, that field's default anyway).
            "targetPorts": [{"number": ENGINE_PORT}],
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
    match: dict[str, Any] = {"path": {"type": "PathPrefix", "value": gateway.path}}
    if gateway.match_model_header:  # pools sharing a Gateway and path are told apart by model
        match["headers"] = [{"type": "Exact", "name": MODEL_HEADER, "value": spec.model.served}]
    route_spec: dict[str, Any] = {
        "parentRefs": [parent],
        "rules": [
            {
                "matches": [match],
                "backendRefs": [{"group": INFERENCE_GROUP, "kind": "InferencePool", "name": pool.name}],
                # The whole request: a maximum-length prefill (retried once after a frozen engine),
                # then a long generation (render_timeouts.py).
                "timeouts": {"request": duration(pool_timeouts(spec).route_s)},
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


def provider_objects(pool: PoolRef, spec: SMetricPoolSpec) -> list[Manifest]:
    gateway = spec.gateway
    provider = gateway.provider if gateway is not None else "none"
    target = {"group": INFERENCE_GROUP, "kind": "InferencePool", "name": pool.name}
    if provider == "istio" and spec.router.secure_serving:
        tls: dict[str, Any] = {"mode": "SIMPLE", "insecureSkipVerify": not spec.router.cert_secret_name}
        return [
            {
                "apiVersion": "networking.istio.io/v1",
                "kind": "DestinationRule",
                "metadata": metadata(pool, pool.epp_name, ROUTING),
                "spec": {
                    "host": f"{pool.epp_name}.{pool.namespace}.svc.cluster.local",
                    "trafficPolicy": {"tls": tls},
                },
            }
        ]
    if provider == "gke":
        return [
            {
                "apiVersion": "networking.gke.io/v1",
                "kind": "HealthCheckPolicy",
                "metadata": metadata(pool, pool.name, ROUTING),
                "spec": {
                    "targetRef": target,
                    "default": {
                        "config": {
                            "type": "HTTP",
                            # port needs USE_FIXED_PORT (a CEL rule of GKE's HealthCheckPolicy CRD)
                            "httpHealthCheck": {
                                "requestPath": "/health",
                                "portSpecification": "USE_FIXED_PORT",
                                "port": ENGINE_PORT,
                            },
                        }
                    },
                },
            },
            {
                "apiVersion": "networking.gke.io/v1",
                "kind": "GCPBackendPolicy",
                "metadata": metadata(pool, pool.name, ROUTING),
                "spec": {
                    "targetRef": target,
                    "default": {"timeoutSec": whole_seconds(pool_timeouts(spec).route_s)},
                },
            },
        ]
    return []
