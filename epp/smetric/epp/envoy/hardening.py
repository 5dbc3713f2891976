"""The gateway's defences against hostile input and faults, as parts of the Envoy bootstrap.

* :func:`scrub_filter` (first HTTP filter, before ext_proc): a request for a path outside the
  inference API allow-list gets a 404 at the gateway (an engine's ``/metrics`` or
  ``/reset_prefix_cache`` is never reachable through it), and the client's copies of every routing
  header (``x-gateway-destination-endpoint*``, ``x-prefiller-host-port``, the picker's own
  ``x-smetric-request-id``, ``x-envoy-*``) are removed before the picker or Envoy's router see them.
* :func:`pool_cluster`: with the pool's endpoints known (``EnvoyOptions.pool_endpoints``, the local
  launchers), the model servers are a STATIC cluster with Envoy's ``override_host`` load-balancing
  policy -- the policy Envoy added for the Endpoint Picker Protocol: it reads the picker's list from
  the ``envoy.lb`` metadata (primary first), and each retry takes the next entry (GIE failover).
  Only pool endpoints exist in that cluster, so no destination can reach Envoy's admin or any other
  address; with no usable list (FailOpen after a picker failure) the fallback policy round-robins
  over the pool. Without ``pool_endpoints`` the ORIGINAL_DST cluster stays (Kubernetes, where the
  gateway owns the pool) and :func:`destination_guard_filter` refuses a request with no destination
  (ORIGINAL_DST would otherwise send it back to Envoy's own listener).
* :func:`original_dst_retry_clusters` and :func:`fallback_headers_filter`: the ORIGINAL_DST path
  retries on the picker's fallbacks too. Envoy's ORIGINAL_DST load balancer takes the one address
  of its header on every attempt, so each attempt has its own ORIGINAL_DST cluster behind Envoy's
  composite cluster (attempt n -> n-th sub-cluster), reading a header the gateway derives from the
  picker's list after ext_proc.
* :func:`retry_policy`: connect failures, refused streams, resets and an engine's 5xx or 429 before
  the response starts are retried on the picker's fallbacks (up to ``retries``; the route reports
  the attempt count, ``x-envoy-attempt-count``, in the response, from which the picker learns which
  entries of its list failed); a retry never happens once the response
  started, so a stream cut mid-response reaches the client as a reset (a truncated chunked body /
  HTTP/2 RST), never as a clean end. No filter can add an SSE error event there: Envoy's router
  resets the downstream stream once the response started, and the filters (ext_proc, Lua) are
  destroyed with it.
* :func:`connection_limits` and :func:`upload_bounds`: slow clients. A request's headers must
  arrive within ``request_headers_timeout``, the whole request within ``request_timeout`` (408 past
  either); a listener holds at most ``max_connections`` downstream connections (the excess is
  closed) and an HTTP/2 connection at most ``max_concurrent_streams`` requests. Envoy's edge-proxy
  guidance sets the same knobs (request_headers_timeout, request_timeout, max_concurrent_streams 100,
  a downstream connection limit). The picker counts a request against its admission limit only once
  its body is complete, so held partial uploads are bounded here and by its decision budget.
* :func:`picker_keepalive`: HTTP/2 PINGs on the picker connection. In FULL_DUPLEX_STREAMED mode Envoy
  runs no ``message_timeout`` and the router's timeouts have not started (the request is still in
  the ext_proc filter), so a stopped picker held requests forever (probe: > 40 s). A stopped or
  wedged picker process answers no PING: Envoy closes the connection after ``interval + timeout``
  and every request waiting on it gets a 500 (FailClose) -- measured 2.1 s with 1 s + 1 s. A live
  but slow picker still answers PINGs (gRPC's core does, off the Python event loop).
"""

from __future__ import annotations

from typing import Any

from smetric.epp.server.guard import INFERENCE_PATHS, TRUSTED_HEADERS

_LUA = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua"
_OVERRIDE_HOST = "type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost"
_ROUND_ROBIN = "type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin"
LB_NAMESPACE = "envoy.lb"
DEST_KEY = "x-gateway-destination-endpoint"
SUBSET_KEY = "x-gateway-destination-endpoint-subset"


def _lua_set(names: tuple[str, ...]) -> str:
    return "{" + ", ".join(f'["{n}"] = true' for n in names) + "}"


def scrub_lua(allowed_paths: tuple[str, ...], keep: tuple[str, ...] = ()) -> str:
    removed = tuple(h for h in TRUSTED_HEADERS if h not in keep)
    path_check = ""
    if allowed_paths:
        path_check = f"""
  local path = h:headers():get(":path") or ""
  local route = string.gsub(string.gsub(path, "?.*$", ""), "(.)/$", "%1")
  if not ({_lua_set(allowed_paths)})[route] then
    h:respond({{[":status"] = "404", ["content-type"] = "application/json"}},
      '{{"error": {{"message": "not an inference API path", "type": "smetric_gateway", "code": 404}}}}')
    return
  end"""
    return f"""
function envoy_on_request(h)
{path_check}
  local drop = {{}}
  for key, _ in pairs(h:headers()) do
    if ({_lua_set(removed)})[key] or string.sub(key, 1, 8) == "x-envoy-" then drop[#drop + 1] = key end
  end
  for _, key in ipairs(drop) do h:headers():remove(key) end
end
"""


def scrub_filter(
    allowed_paths: tuple[str, ...] = INFERENCE_PATHS, keep: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``keep``: client headers the gateway itself uses (the test gateway's subset-hint header)."""
    return {
        "name": "smetric.scrub",
        "typed_config": {
            "@type": _LUA,
            "default_source_code": {"inline_string": scrub_lua(allowed_paths, keep)},
        },
    }


DESTINATION_GUARD_LUA = """
function envoy_on_request(h)
  if h:headers():get("x-smetric-destination-primary") == nil then
    h:respond({[":status"] = "503", ["content-type"] = "application/json"},
      '{"error": {"message": "the endpoint picker chose no destination", "type": "smetric_gateway", "code": 503}}')
  end
end
"""


def destination_guard_filter() -> dict[str, Any]:
    return {
        "name": "smetric.destination_guard",
        "typed_config": {"@type": _LUA, "default_source_code": {"inline_string": DESTINATION_GUARD_LUA}},
    }


def _socket(address: str) -> dict[str, Any]:
    host, port = address.rsplit(":", 1)
    return {"socket_address": {"address": host.strip("[]"), "port_value": int(port)}}


# Envoy's own outlier detection on the pool cluster (cluster/v3/outlier_detection.proto; Envoy's
# defaults: consecutive_5xx 5, interval 10 s, base_ejection_time 30 s, max_ejection_percent 10).
# The picker's (--outlier-*) is the one that steers routing: override_host takes the picker's
# hosts without looking at their health (findHost in Envoy's override_host load_balancer.cc:
# "TODO: Validate that host health status did not change"), so an ejection here acts where Envoy
# chooses itself -- the round-robin fallback (FailOpen, or a retry past the picker's list) -- and
# shows in the cluster's outlier stats. Same count and base time as the picker's defaults; a 1 s
# sweep; at most half the pool out (the rest keeps the fallback usable).
POOL_OUTLIER_DETECTION: dict[str, Any] = {
    "consecutive_5xx": 3,
    "enforcing_consecutive_5xx": 100,
    "consecutive_gateway_failure": 3,
    "enforcing_consecutive_gateway_failure": 100,
    "interval": "1s",
    "base_ejection_time": "10s",
    "max_ejection_time": "300s",
    "max_ejection_percent": 50,
}


def pool_cluster(
    name: str,
    endpoints: tuple[str, ...],
    connect_timeout_s: float,
    circuit_breakers: dict[str, Any],
    outlier_detection: bool = True,
) -> dict[str, Any]:
    fallback = {
        "policies": [
            {
                "typed_extension_config": {
                    "name": "envoy.load_balancing_policies.round_robin",
                    "typed_config": {"@type": _ROUND_ROBIN},
                }
            }
        ]
    }
    override = {
        "@type": _OVERRIDE_HOST,
        "override_host_sources": [{"metadata": {"key": LB_NAMESPACE, "path": [{"key": DEST_KEY}]}}],
        "fallback_policy": fallback,
    }
    return {
        "name": name,
        "type": "STATIC",
        "circuit_breakers": circuit_breakers,
        **({"outlier_detection": POOL_OUTLIER_DETECTION} if outlier_detection else {}),
        "connect_timeout": f"{connect_timeout_s:g}s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _socket(e)}} for e in endpoints]}],
        },
        "load_balancing_policy": {
            "policies": [
                {
                    "typed_extension_config": {
                        "name": "envoy.load_balancing_policies.override_host",
                        "typed_config": override,
                    }
                }
            ]
        },
    }


FALLBACK_HEADER = "x-smetric-destination-fallback-"  # + 1, 2, ...: the picker's n-th fallback
_COMPOSITE = "type.googleapis.com/envoy.extensions.clusters.composite.v3.ClusterConfig"


def fallback_headers_lua(retries: int) -> str:
    """Runs after ext_proc: the picker's list (``x-gateway-destination-endpoint``, primary first)
    becomes one header per fallback, ``x-smetric-destination-fallback-<n>``, for the ORIGINAL_DST
    sub-cluster of attempt n + 1. Client copies are removed first, so only the picker's list sets
    them. A list shorter than the retries sends the remaining attempts to its last entry: the
    client then gets that engine's own answer (a 429 with its ``Retry-After``), not the "no healthy
    upstream" 503 of an attempt without a host (the pool cluster's override_host falls back to
    round robin over the pool there)."""
    return f"""
function envoy_on_request(h)
  local headers = h:headers()
  for n = 1, {retries} do headers:remove("{FALLBACK_HEADER}" .. n) end
  local list = headers:get("{DEST_KEY}")
  if list == nil then return end
  local n, last = 0, nil
  for e in string.gmatch(list, "[^,%s]+") do
    if n >= 1 and n <= {retries} then headers:add("{FALLBACK_HEADER}" .. n, e) end
    last = e
    n = n + 1
  end
  if last ~= nil then
    for k = math.max(n, 1), {retries} do headers:add("{FALLBACK_HEADER}" .. k, last) end
  end
end
"""


def fallback_headers_filter(retries: int) -> dict[str, Any]:
    return {
        "name": "smetric.fallback_headers",
        "typed_config": {
            "@type": _LUA,
            "default_source_code": {"inline_string": fallback_headers_lua(retries)},
        },
    }


def original_dst_retry_clusters(
    name: str, retries: int, primary_header: str, base: dict[str, Any]
) -> list[dict[str, Any]]:
    """The ORIGINAL_DST path with retries on the picker's fallbacks: ``name`` is Envoy's composite
    cluster (``envoy.clusters.composite``: attempt n goes to its n-th sub-cluster), over one
    ORIGINAL_DST cluster per attempt -- the primary's reads ``primary_header``, the n-th
    fallback's ``x-smetric-destination-fallback-<n>`` (:func:`fallback_headers_lua`). An ORIGINAL_DST
    cluster alone would retry the same address: its load balancer takes the one address of its
    header on every attempt. When the picker returned fewer fallbacks than retries, the last entry
    fills the remaining headers (:func:`fallback_headers_lua`). ``base``: the common cluster fields."""
    attempts = [f"{name}_primary"] + [f"{name}_fallback_{n}" for n in range(1, retries + 1)]
    headers = [primary_header] + [f"{FALLBACK_HEADER}{n}" for n in range(1, retries + 1)]
    subs = [
        {
            **base,
            "name": cluster,
            "type": "ORIGINAL_DST",
            "lb_policy": "CLUSTER_PROVIDED",
            "original_dst_lb_config": {"use_http_header": True, "http_header_name": header},
        }
        for cluster, header in zip(attempts, headers, strict=True)
    ]
    composite = {
        "name": name,
        "lb_policy": "CLUSTER_PROVIDED",
        "connect_timeout": base["connect_timeout"],
        "circuit_breakers": base["circuit_breakers"],
        "cluster_type": {
            "name": "envoy.clusters.composite",
            "typed_config": {"@type": _COMPOSITE, "clusters": [{"name": c} for c in attempts]},
        },
    }
    return [composite, *subs]


# Statuses retried besides 5xx: an engine's 429 (overloaded) is another engine's 200.
RETRIABLE_STATUS_CODES = (429,)


def retry_policy(retries: int, per_try_idle_timeout_s: float = 0.0, on_status: bool = True) -> dict[str, Any]:
    """``per_try_idle_timeout_s`` > 0: an attempt that sees no byte for that long (a frozen
    engine: the kernel accepted the connection, nothing answers) is reset; before its response
    started it is retried on the picker's next fallback, after that the stream is cut. It must stay
    above the longest legitimate silence (a prefill) and below the stream idle timeout, which would
    otherwise end the request first.

    ``on_status``: an engine's 5xx or 429 answer is retried on the next fallback too (Envoy's
    ``5xx`` and ``retriable-status-codes`` conditions: a status is known before any response byte
    reaches the client, so the retry is invisible to it). The retry goes at once to another engine:
    Envoy's ``rate_limited_retry_back_off`` would make it wait out the 429's ``Retry-After``, a
    pause the *refusing* engine asked for; the picker honours that one (it sends the engine nothing
    until it is over, :mod:`smetric.epp.server.outlier`)."""
    retry_on = "connect-failure,refused-stream,reset"
    policy: dict[str, Any] = {
        "retry_on": retry_on + (",5xx,retriable-status-codes" if on_status else ""),
        "num_retries": retries,
        "retry_back_off": {"base_interval": "0.02s", "max_interval": "0.2s"},
    }
    if on_status:
        policy["retriable_status_codes"] = list(RETRIABLE_STATUS_CODES)
    if per_try_idle_timeout_s > 0:
        policy["per_try_idle_timeout"] = f"{per_try_idle_timeout_s:g}s"
    return policy


def picker_keepalive(interval_s: float, timeout_s: float) -> dict[str, Any]:
    return {"interval": f"{interval_s:g}s", "timeout": f"{timeout_s:g}s"}


def connection_limits(listeners: list[str], max_connections: int) -> dict[str, Any]:
    """The bootstrap's ``layered_runtime``: at most ``max_connections`` open downstream
    connections per listener (Envoy's runtime key ``envoy.resource_limits.listener.<name>
    .connection_limit``); a connection past it is closed at once and counted in the listener's
    ``downstream_cx_overflow``."""
    limits = {f"envoy.resource_limits.listener.{n}.connection_limit": max_connections for n in listeners}
    return {"layers": [{"name": "connection_limits", "static_layer": limits}]}


def upload_bounds(
    request_headers_timeout_s: float, request_timeout_s: float, max_concurrent_streams: int
) -> dict[str, Any]:
    """HttpConnectionManager fields bounding a slow client (0 leaves one off). ``request_timeout``
    is disarmed once the request is sent upstream (after the picker's decision) or the response
    starts, so a long prefill is not cut by it."""
    hcm: dict[str, Any] = {}
    if request_headers_timeout_s > 0:
        hcm["request_headers_timeout"] = f"{request_headers_timeout_s:g}s"
    if request_timeout_s > 0:
        hcm["request_timeout"] = f"{request_timeout_s:g}s"
    if max_concurrent_streams > 0:
        hcm["http2_protocol_options"] = {"max_concurrent_streams": max_concurrent_streams}
    return hcm


# Envoy's HTTP codec limits, raised so that the protocol guard (a filter, whose local replies reach
# the client) answers first; past these the codec closes the connection without a status when an
# ext_proc filter is in the chain (envoyproxy/envoy#29440).
CODEC_MAX_HEADERS_KB = 1024
CODEC_MAX_HEADERS = 1000


def protocol_guard_lua(max_header_bytes: int, max_headers: int) -> str:
    return f"""
function envoy_on_request(h)
  if h:streamInfo():protocol() == "HTTP/1.0" then
    h:respond({{[":status"] = "426", ["upgrade"] = "HTTP/1.1", ["content-type"] = "application/json"}},
      '{{"error": {{"message": "HTTP/1.0 is not supported: use HTTP/1.1 or HTTP/2", "type": "smetric_gateway", "code": 426}}}}')
    return
  end
  local size, count = 0, 0
  for key, value in pairs(h:headers()) do
    size = size + #key + #value
    count = count + 1
  end
  if size > {max_header_bytes} or count > {max_headers} then
    h:respond({{[":status"] = "431", ["content-type"] = "application/json"}},
      '{{"error": {{"message": "request headers exceed {max_header_bytes} bytes or {max_headers} fields", "type": "smetric_gateway", "code": 431}}}}')
  end
end
"""


def protocol_guard_filter(max_header_bytes: int, max_headers: int) -> dict[str, Any]:
    """First HTTP filter: HTTP/1.0 gets 426 Upgrade Required, headers past ``max_header_bytes`` or
    ``max_headers`` fields get 431. Envoy's codec would refuse both itself (HTTP/1.0 by default,
    headers past 60 KiB / 100 fields), but with an ext_proc filter in the chain its local reply
    never reaches the client (envoyproxy/envoy#29440: the connection is closed without a status),
    so the codec accepts them (:func:`codec_limits`) and this filter answers."""
    return {
        "name": "smetric.protocol_guard",
        "typed_config": {
            "@type": _LUA,
            "default_source_code": {"inline_string": protocol_guard_lua(max_header_bytes, max_headers)},
        },
    }


def codec_limits() -> dict[str, Any]:
    """HttpConnectionManager fields: the codec accepts HTTP/1.0 and headers up to
    ``CODEC_MAX_HEADERS_KB`` / ``CODEC_MAX_HEADERS`` (the protocol guard answers below that)."""
    return {
        "http_protocol_options": {"accept_http_10": True, "default_host_for_http_10": "gateway"},
        "max_request_headers_kb": CODEC_MAX_HEADERS_KB,
        "common_http_protocol_options": {"max_headers_count": CODEC_MAX_HEADERS},
    }
