"""The gateway's timeouts for the pool: derived from its longest legitimate silence, a cold prefill
of the maximum model length on the pool's cost model (:mod:`smetric.core.gatewaytimeouts`), so a
maximum-length prompt is never cut or re-sent by the gateway while its engine works on it.

Inputs: ``model.maxModelLen`` (omitted: the model's context length from its preset, else 262,144,
the default model's); the cost model ``router.parameters.costModel`` (omitted: the model's preset
with its KV dtype and tensor parallelism, else the picker's default, Qwen3-Coder-30B-A3B on one H20);
the TPOT SLO ``router.parameters.tpotSloS`` for the generation allowance of the whole-request bound.

What each gateway gets (the pinned versions of docs/deploy.md):

* every provider: the HTTPRoute's ``timeouts.request`` (Gateway API v1.3.0 ``HTTPRouteTimeouts``,
  the whole request) = ``route_s``. ``backendRequest`` is left unset: implementations map it to a
  per-attempt timeout that would also bound the generation.
* ``envoy-gateway`` (v1.9.0): a ``BackendTrafficPolicy`` targeting the HTTPRoute with
  ``timeout.http.streamIdleTimeout`` = ``stream_idle_s`` (api/v1alpha1/timeout_types.go l. 55-61:
  a route-level stream idle timeout; without it the listener's applies, 5 minutes by default,
  l. 122-126 -- below a 262,144-token prefill, 584 s on one H20).
* ``istio`` (1.28.0): nothing more. Istio sets ``stream_idle_timeout: 0s`` (off) on every HTTP
  connection manager it builds (pilot/pkg/networking/core/listener_builder.go l. 371) and gives the
  route the HTTPRoute's request timeout.
* ``gke``: ``GCPBackendPolicy`` ``default.timeoutSec`` = ``route_s`` (the load balancer's backend
  service timeout: the whole response).
* ``kgateway`` (v2.1.0): only the HTTPRoute's request timeout. Its ``TrafficPolicy``
  ``timeouts.streamIdle`` is the field for the rest; no CRD schema of that version is pinned here, so
  it is not rendered: docs/operator.md shows the object to add (Envoy's default stream idle
  timeout, 5 minutes, otherwise cuts a longer prefill).

Kubernetes durations are whole seconds here, rounded up (:func:`whole_seconds`).

No retry and no outlier detection is rendered next to these timeouts (docs/operator.md, "Retries
and outlier detection per gateway"): Envoy Gateway's InferencePool cluster (built by Envoy AI
Gateway's extension server) and kgateway's are ORIGINAL_DST on ``x-gateway-destination-endpoint``,
where a retry goes back to the engine that failed and health is not consulted; Istio's is
override_host, which already retries connect failures on the picker's fallbacks with its default
route retry, and the HTTPRoute ``retry`` that would add more is not in the pinned standard-channel
CRD; GKE's GCPBackendPolicy has no such field.
"""

from __future__ import annotations

from smetric.core.costmodel import CostModel
from smetric.core.gatewaytimeouts import DEFAULT_PRESET, GatewayTimeouts, whole_seconds
from smetric.core.presets import PRESETS
from smetric.operator.meta import ROUTING, Manifest, PoolRef, metadata
from smetric.operator.render_picker import pool_preset
from smetric.operator.spec import SMetricPoolSpec

EG_API_VERSION = "gateway.envoyproxy.io/v1alpha1"
GATEWAY_GROUP = "gateway.networking.k8s.io"


def pool_timeouts(spec: SMetricPoolSpec) -> GatewayTimeouts:
    preset = pool_preset(spec) or PRESETS[DEFAULT_PRESET]
    params = spec.router.parameters
    cost = (
        CostModel(c_lin_s=params.cost_model.c_lin_s, c_att_s=params.cost_model.c_att_s)
        if params.cost_model is not None
        else preset.cost_model
    )
    length = spec.model.max_model_len or preset.model.max_context_tokens
    return GatewayTimeouts.derive(cost, length, tpot_s=params.tpot_slo_s)


def duration(seconds: float) -> str:
    return f"{whole_seconds(seconds)}s"


def envoy_gateway_backend_policy(pool: PoolRef, spec: SMetricPoolSpec) -> Manifest:
    t = pool_timeouts(spec)
    target = {"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": pool.name}
    return {
        "apiVersion": EG_API_VERSION,
        "kind": "BackendTrafficPolicy",
        "metadata": metadata(pool, pool.child("timeouts"), ROUTING),
        "spec": {
            "targetRefs": [target],
            "timeout": {"http": {"streamIdleTimeout": duration(t.stream_idle_s)}},
        },
    }


def gateway_timeouts(pool: PoolRef, spec: SMetricPoolSpec) -> list[Manifest]:
    """The provider's own timeout object (the HTTPRoute and GCPBackendPolicy carry theirs)."""
    gateway = spec.gateway
    if gateway is not None and gateway.provider == "envoy-gateway":
        return [envoy_gateway_backend_policy(pool, spec)]
    return []
