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
* ``kgateway`` (v2.1.0): a ``TrafficPolicy`` (``gateway.kgateway.dev/v1alpha1``) targeting the
  HTTPRoute with ``timeouts.streamIdle`` = ``stream_idle_s``. Envoy's stream idle timeout, 5 minutes
  by default, otherwise cuts a longer prefill. Source: kgateway-dev/kgateway at commit 8b11de40dc
  (14 Oct 2025, "update rolling releases to v2.2.0-main", main right after the v2.1 release cut;
  the v2.1.0 tag itself is in no mirror here, read from the sheidkamp/kgateway fork, which carries
  upstream's history): api/v1alpha1/traffic_policy_types.go l. 46-52 (``targetRefs`` may name an
  ``HTTPRoute``), l. 106-109 (``timeouts``: applied to HTTPRoutes, ignored for other kinds),
  l. 459-476 (``Timeouts.request`` / ``streamIdle``, strings matching
  ``^([0-9]{1,5}(h|m|s|ms)){1,4}$``); api/v1alpha1/shared_types.go l. 26-48 (each target needs
  ``group``, ``kind``, ``name``); the CRD install/helm/kgateway-crds/templates/
  gateway.kgateway.dev_trafficpolicies.yaml l. 809-845 and 880-892 says the same.
  internal/kgateway/extensions2/plugins/trafficpolicy/traffic_policy_plugin.go l. 661-668 sets it
  as the Envoy route's ``idle_timeout`` (which overrides the listener's stream idle timeout) and
  sets ``timeouts.request`` only on a route without a timeout -- the HTTPRoute's request timeout
  is always there, so ``request`` is left unset. ``streamIdle`` came with #11970 (77e516ea16,
  13 Aug 2025; not in v2.0.x) and is unchanged up to the v2.2.x branch (api/v1alpha1/shared/
  timeouts.go there), so v2.1.0 has it; the kgateway.dev 2.1.x docs
  (resiliency/timeouts/idle-stream) show this same object.

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
KGATEWAY_API_VERSION = "gateway.kgateway.dev/v1alpha1"
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


def _route_policy(pool: PoolRef, api_version: str, kind: str, timeouts: Manifest) -> Manifest:
    """A gateway policy object ``<pool>-timeouts`` targeting the pool's HTTPRoute."""
    target = {"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": pool.name}
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": metadata(pool, pool.child("timeouts"), ROUTING),
        "spec": {"targetRefs": [target], **timeouts},
    }


def envoy_gateway_backend_policy(pool: PoolRef, spec: SMetricPoolSpec) -> Manifest:
    idle = duration(pool_timeouts(spec).stream_idle_s)
    return _route_policy(
        pool, EG_API_VERSION, "BackendTrafficPolicy", {"timeout": {"http": {"streamIdleTimeout": idle}}}
    )


def kgateway_traffic_policy(pool: PoolRef, spec: SMetricPoolSpec) -> Manifest:
    idle = duration(pool_timeouts(spec).stream_idle_s)
    return _route_policy(pool, KGATEWAY_API_VERSION, "TrafficPolicy", {"timeouts": {"streamIdle": idle}})


def gateway_timeouts(pool: PoolRef, spec: SMetricPoolSpec) -> list[Manifest]:
    """The provider's own timeout object (the HTTPRoute and GCPBackendPolicy carry theirs)."""
    gateway = spec.gateway
    if gateway is None:
        return []
    if gateway.provider == "envoy-gateway":
        return [envoy_gateway_backend_policy(pool, spec)]
    if gateway.provider == "kgateway":
        return [kgateway_traffic_policy(pool, spec)]
    return []
