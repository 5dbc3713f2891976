"""``gateway.clientLimits``: slow-client bounds on the Gateway's listeners, as the gateway
implementation's own object attached to the pool's Gateway (docs/operator.md, "Slow clients"):

* ``envoy-gateway``: a ``ClientTrafficPolicy`` (``gateway.envoyproxy.io/v1alpha1``, Envoy Gateway
  v1.9.0): ``timeout.http.requestHeadersReceivedTimeout`` (Envoy HCM ``request_headers_timeout``;
  new in v1.9.0), ``timeout.http.requestReceivedTimeout`` (HCM ``request_timeout``: "stops when
  either the last byte of the request is sent upstream or when the response begins") and
  ``connection.connectionLimit.value`` (the ``envoy.filters.network.connection_limit`` filter),
  ``http2.maxConcurrentStreams``.
* ``istio``: an ``EnvoyFilter`` (``networking.istio.io/v1alpha3``, Istio 1.28) with ``targetRefs``
  to the Gateway: a ``MERGE`` of ``request_headers_timeout``, ``request_timeout`` and
  ``http2_protocol_options.max_concurrent_streams`` into the gateway's HTTP connection manager and the connection-limit filter inserted first in each of its
  filter chains. Istio has no typed field for these (ProxyConfig and MeshConfig carry none).
* ``kgateway`` (v2.1.0), ``gke``, ``none``: nothing. kgateway's HTTPListenerPolicy has idle and
  stream-idle timeouts only, and its TrafficPolicy ``timeouts.request`` also covers the response;
  GKE's GCPGatewayPolicy has ``allowGlobalAccess``, ``region`` and ``sslPolicy`` only.

Envoy's ``request_timeout`` is disarmed once the request is sent upstream (or the response begins),
so it bounds the upload only: a long prefill that is quiet for minutes is not cut.

The policies attach to a Gateway in the pool's namespace (both kinds take local references only);
for a Gateway in another namespace nothing is rendered and :func:`client_limit_warnings` says so.
"""

from __future__ import annotations

from typing import Any

from smetric.operator.meta import ROUTING, Manifest, PoolRef, metadata
from smetric.operator.spec import SMetricPoolSpec

GATEWAY_GROUP = "gateway.networking.k8s.io"
EG_API_VERSION = "gateway.envoyproxy.io/v1alpha1"
ISTIO_FILTER_API_VERSION = "networking.istio.io/v1alpha3"
HCM = "envoy.filters.network.http_connection_manager"
HCM_TYPE = (
    "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)
CONNECTION_LIMIT = "envoy.filters.network.connection_limit"
CONNECTION_LIMIT_TYPE = (
    "type.googleapis.com/envoy.extensions.filters.network.connection_limit.v3.ConnectionLimit"
)
STAT_PREFIX = "smetric_client_limits"


def _name(pool: PoolRef) -> str:
    return pool.child("client-limits")


def _same_namespace(pool: PoolRef, spec: SMetricPoolSpec) -> bool:
    gateway = spec.gateway
    return gateway is not None and gateway.parent_ref.namespace in (None, "", pool.namespace)


def _target(spec: SMetricPoolSpec) -> dict[str, str]:
    assert spec.gateway is not None
    return {"group": GATEWAY_GROUP, "kind": "Gateway", "name": spec.gateway.parent_ref.name}


def envoy_gateway_policy(pool: PoolRef, spec: SMetricPoolSpec) -> Manifest:
    assert spec.gateway is not None
    limits = spec.gateway.client_limits
    body: dict[str, Any] = {"targetRefs": [_target(spec)]}
    http: dict[str, str] = {}
    if limits.request_headers_timeout_s:
        http["requestHeadersReceivedTimeout"] = f"{limits.request_headers_timeout_s}s"
    if limits.request_timeout_s:
        http["requestReceivedTimeout"] = f"{limits.request_timeout_s}s"
    if http:
        body["timeout"] = {"http": http}
    if limits.max_connections:
        body["connection"] = {"connectionLimit": {"value": limits.max_connections}}
    if limits.max_concurrent_streams:
        body["http2"] = {"maxConcurrentStreams": limits.max_concurrent_streams}
    return {
        "apiVersion": EG_API_VERSION,
        "kind": "ClientTrafficPolicy",
        "metadata": metadata(pool, _name(pool), ROUTING),
        "spec": body,
    }


def _hcm_match() -> dict[str, Any]:
    return {"context": "GATEWAY", "listener": {"filterChain": {"filter": {"name": HCM}}}}


def istio_envoy_filter(pool: PoolRef, spec: SMetricPoolSpec) -> Manifest:
    assert spec.gateway is not None
    limits = spec.gateway.client_limits
    patches: list[dict[str, Any]] = []
    hcm: dict[str, Any] = {"@type": HCM_TYPE}
    if limits.request_headers_timeout_s:
        hcm["request_headers_timeout"] = f"{limits.request_headers_timeout_s}s"
    if limits.request_timeout_s:
        hcm["request_timeout"] = f"{limits.request_timeout_s}s"
    if limits.max_concurrent_streams:
        hcm["http2_protocol_options"] = {"max_concurrent_streams": limits.max_concurrent_streams}
    if len(hcm) > 1:
        patches.append(
            {
                "applyTo": "NETWORK_FILTER",
                "match": _hcm_match(),
                "patch": {"operation": "MERGE", "value": {"name": HCM, "typed_config": hcm}},
            }
        )
    if limits.max_connections:
        limit = {
            "@type": CONNECTION_LIMIT_TYPE,
            "stat_prefix": STAT_PREFIX,
            "max_connections": limits.max_connections,
        }
        patches.append(
            {
                "applyTo": "NETWORK_FILTER",
                "match": _hcm_match(),
                "patch": {
                    "operation": "INSERT_FIRST",
                    "value": {"name": CONNECTION_LIMIT, "typed_config": limit},
                },
            }
        )
    return {
        "apiVersion": ISTIO_FILTER_API_VERSION,
        "kind": "EnvoyFilter",
        "metadata": metadata(pool, _name(pool), ROUTING),
        "spec": {"targetRefs": [_target(spec)], "configPatches": patches},
    }


def client_limits(pool: PoolRef, spec: SMetricPoolSpec) -> list[Manifest]:
    """The provider's client-limit object, or nothing (no gateway, limits off or all 0, a provider
    without such a setting, or a Gateway in another namespace)."""
    gateway = spec.gateway
    if gateway is None or not gateway.client_limits.any_set or not _same_namespace(pool, spec):
        return []
    if gateway.provider == "envoy-gateway":
        return [envoy_gateway_policy(pool, spec)]
    if gateway.provider == "istio":
        return [istio_envoy_filter(pool, spec)]
    return []


def client_limit_warnings(name: str, namespace: str, spec: SMetricPoolSpec) -> list[str]:
    """A line when the limits are on for a provider that takes them but cannot be rendered: the
    Gateway is in another namespace than the pool."""
    gateway = spec.gateway
    if (
        gateway is None
        or gateway.provider not in ("envoy-gateway", "istio")
        or not gateway.client_limits.any_set
    ):
        return []
    if gateway.parent_ref.namespace in (None, "", namespace):
        return []
    kind = "ClientTrafficPolicy" if gateway.provider == "envoy-gateway" else "EnvoyFilter"
    return [
        f"SMetricPool {name}: gateway.clientLimits not rendered: Gateway {gateway.parent_ref.namespace}/"
        f"{gateway.parent_ref.name} is in another namespace and a {kind} attaches to a Gateway in its own "
        "namespace only; create it next to the Gateway (docs/operator.md, Slow clients) or set "
        "gateway.clientLimits.enabled: false"
    ]
