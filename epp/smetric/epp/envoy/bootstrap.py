"""Envoy bootstrap for the Endpoint Picker Protocol, generated in code (dicts in Envoy's JSON form,
parsed into envoy-data-plane's typed ``Bootstrap`` message on every build, so a misspelt field
raises ``BootstrapError`` at build time; ``envoy --mode validate`` in the tests checks the rest).

listener -> HCM -> ext_proc (picker cluster, h2c) -> router -> ``ORIGINAL_DST`` cluster that
routes to the address in ``x-smetric-destination-primary`` (the picker's primary; the protocol's
``x-gateway-destination-endpoint`` carries the whole list, which ORIGINAL_DST cannot parse); with
retries, a composite cluster sends attempt n to an ORIGINAL_DST cluster reading the picker's n-th
fallback (``hardening.original_dst_retry_clusters``). With ``pool_endpoints`` the override_host pool
cluster replaces both. Optionally a second listener routes straight to one backend without the
picker (the bench's baseline).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from smetric.core.gatewaytimeouts import GatewayTimeouts, default_timeouts
from smetric.epp.envoy.hardening import (
    codec_limits,
    connection_limits,
    destination_guard_filter,
    fallback_headers_filter,
    original_dst_retry_clusters,
    picker_keepalive,
    pool_cluster,
    protocol_guard_filter,
    retry_policy,
    scrub_filter,
    upload_bounds,
)
from smetric.epp.envoy.typed import typed_bootstrap
from smetric.epp.server.guard import INFERENCE_PATHS
from smetric.epp.server.messages import CONNECTION_ID

DEST_HEADER = "x-gateway-destination-endpoint"
PRIMARY_HEADER = (
    "x-smetric-destination-primary"  # ORIGINAL_DST needs one ip:port; DEST_HEADER carries the list
)
SUBSET_NAMESPACE = "envoy.lb.subset_hint"
SUBSET_KEY = "x-gateway-destination-endpoint-subset"
_LUA = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua"

# What a gateway does with an InferencePool subset (standalone Envoy: taken from a request header).
SUBSET_FROM_HEADER_LUA = f"""
function envoy_on_request(h)
  local v = h:headers():get("{SUBSET_KEY}")
  if v ~= nil then
    local t = {{}}
    for e in string.gmatch(v, "[^,%s]+") do t[#t + 1] = e end
    h:streamInfo():dynamicMetadata():set("{SUBSET_NAMESPACE}", "{SUBSET_KEY}", t)
  end
end
"""
BodyMode = Literal["FULL_DUPLEX_STREAMED", "BUFFERED", "STREAMED", "NONE"]
ResponsePath = Literal["inline", "observer"]

_HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
_EXT_PROC = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
_ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
_HTTP_OPTS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
_HTTP_OPTS_TYPE = "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
_DEFAULT_TIMEOUTS = default_timeouts()


@dataclass(frozen=True, slots=True)
class EnvoyOptions:
    """``request_body_mode`` FULL_DUPLEX_STREAMED (default, the protocol's required mode) or
    BUFFERED (body held by Envoy up to ``buffer_limit_bytes``). ``failure_mode_allow`` = FailOpen.

    ``response_body_mode`` (the picker only observes the response):

    * FULL_DUPLEX_STREAMED (default): every chunk goes to the picker and is echoed back. The picker
      sees the first body byte (the TTFT point that releases the dispatch ledger and feeds the
      prefill-rate estimate) and the usage (``cached_tokens``). Envoy runs no ``message_timeout``
      in this mode: a chunk the picker never answers stalls that response until
      ``route_timeout_s`` (the servicer answers every chunk, tests/unit/epp/test_epp_duplex_response.py).
    * STREAMED: the same observations, an empty reply per chunk, and ``message_timeout`` applies,
      so a stalled picker fails the response after ``message_timeout_s`` instead of hanging it --
      and a picker event loop lagging that long under overload fails healthy responses too.
    * NONE: response headers only (picker CPU 3.8 s instead of 4.2 s for 200 requests in the load
      harness, one run each). No usage, and the ledger entry goes at the response headers:
      right when the server sends headers with the first token (the emulator), too early for
      a server whose streaming response starts before its generator yields a token (vLLM's
      StreamingResponse); the TTFT samples are then header times. Not a default.

    Measured with tests/integration/envoy/test_envoy_stuck_load.py (200 requests, 50 at a time, 8
    emulated instances, x0.1): all three modes finished every request; wall first-chunk and
    per-chunk gaps differed by less than the run-to-run noise on the shared 2-core box.

    ``response_path="observer"`` (pair it with the picker's ``--response-path=observer``): the
    routing filter skips the response (``response_body_mode`` is then ignored) and a second
    ext_proc filter in ``observability_mode`` sends the request headers and the STREAMED response
    to the picker without waiting for replies. The picker observes the same things (status, first
    body byte, usage) while Envoy never holds a response for it: one ext_proc round trip per
    request instead of three, and a slow or stalled picker cannot delay a token
    (smetric.bench.latency.picker measures both paths side by side). It does not save picker CPU: the
    observer still receives every response chunk (load harness, 300 streaming requests 150 at a
    time, x0.1: 6.8 s of picker CPU either way, every request finished, per-chunk gaps alike)."""

    listen_port: int
    admin_port: int
    picker_port: int
    picker_host: str = "127.0.0.1"
    # Further picker replicas on picker_host: one ext_proc cluster, each stream to one of them.
    more_picker_ports: tuple[int, ...] = ()
    # A picker stream whose connection fails (a replica killed or restarting) is opened again on
    # another replica up to this many times (picker_stream_retry); 0: the request fails at once.
    picker_stream_retries: int = 2
    picker_ejection: bool = True  # PICKER_EJECTION on the picker cluster
    listen_host: str = "127.0.0.1"
    request_body_mode: BodyMode = "FULL_DUPLEX_STREAMED"
    response_body_mode: BodyMode = "FULL_DUPLEX_STREAMED"
    response_path: ResponsePath = "inline"
    failure_mode_allow: bool = False
    message_timeout_s: float = 10.0
    # The whole request: the silences below, then a long generation (GatewayTimeouts.route_s).
    route_timeout_s: float = _DEFAULT_TIMEOUTS.route_s
    connect_timeout_s: float = 2.0
    buffer_limit_bytes: int = 32 * 1024 * 1024
    direct_port: int | None = None  # second listener straight to direct_backend (no picker)
    direct_backend: str | None = None  # ip:port
    subset_hint_header: bool = False  # Lua filter: header x-gateway-destination-endpoint-subset -> hint
    # Hardening (envoy/hardening.py). pool_endpoints: the model servers (ip:port) when known (local
    # launchers): a STATIC cluster with the override_host policy (only pool endpoints reachable,
    # retries on the picker's fallbacks, FailOpen round-robins over the pool); empty: ORIGINAL_DST
    # (with retries: one ORIGINAL_DST cluster per attempt behind a composite cluster).
    pool_endpoints: tuple[str, ...] = ()
    allowed_paths: tuple[str, ...] = INFERENCE_PATHS  # others: 404 at the gateway (empty: all)
    # Connect failure / refused / reset before the response: the next fallback, on either upstream.
    # 0: no retry (and no per-try idle timeout); ORIGINAL_DST is then one header-driven cluster.
    retries: int = 2
    # An engine's 5xx or 429 is retried on the next fallback too (hardening.retry_policy).
    retry_on_status: bool = True
    # Envoy's outlier detection on the pool cluster (hardening.POOL_OUTLIER_DETECTION).
    pool_outlier_detection: bool = True
    # An attempt silent this long is reset and, before its response, retried on the next fallback
    # (a frozen engine). The three timeouts come from smetric.core.gatewaytimeouts: derived from the
    # pool's longest legitimate silence, a cold prefill of the maximum model length (default: the
    # picker's default cost model at 262,144 tokens, 584 s): per-try idle 1.25 x that, so a
    # request an engine accepted is re-sent only when the engine stopped answering; 0 = off.
    # A pool with another model, length or time scale: EnvoyOptions.with_timeouts(GatewayTimeouts).
    per_try_idle_timeout_s: float = _DEFAULT_TIMEOUTS.per_try_idle_s
    # Longest silence of a healthy request. Envoy does not restart this timer for a retry: a request
    # whose first attempt waited out the per-try idle timeout on a frozen engine has what is left of
    # it for the retry's first byte, so it is the per-try idle timeout + 1.25 x the longest prefill.
    stream_idle_timeout_s: float = _DEFAULT_TIMEOUTS.stream_idle_s
    picker_keepalive_s: float = 1.0  # PING interval and timeout: a stopped picker -> 500 in ~2 s
    # Slow clients (hardening.upload_bounds; 0 = off): headers within 10 s, the whole request within
    # 60 s (a 16 MiB body at >= 0.3 MB/s; the picker's 10 s decision budget usually ends a stalled
    # upload first), 10,000 downstream connections per listener, 100 requests per HTTP/2 connection.
    request_headers_timeout_s: float = 10.0
    request_timeout_s: float = 60.0
    max_connections: int = 10_000
    max_concurrent_streams: int = 100
    # HTTP/1.0 -> 426, headers past 60 KiB or 100 fields (Envoy's own defaults) -> 431, answered by
    # a Lua filter (hardening.protocol_guard_filter); False: Envoy's codec refuses them itself and,
    # with ext_proc in the chain, closes the connection without a status.
    protocol_guard: bool = True
    max_request_header_bytes: int = 60 * 1024
    max_request_headers: int = 100
    served_by_header: bool = False  # response header x-smetric-served-by: upstream ip:port (tests, chaos)

    def with_timeouts(self, t: GatewayTimeouts) -> EnvoyOptions:
        """These options with the per-try idle, stream idle and route timeouts derived for a pool
        (``GatewayTimeouts.for_preset(preset, max_model_len, time_scale=...)``)."""
        return replace(
            self,
            per_try_idle_timeout_s=t.per_try_idle_s,
            stream_idle_timeout_s=t.stream_idle_s,
            route_timeout_s=t.route_s,
        )


def _secs(s: float) -> str:
    return f"{s:g}s"


def _socket(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


# Envoy's default circuit breakers allow 1,024 concurrent requests per cluster: the picker cluster
# carries one ext_proc stream per in-flight request (two with the response observer, which Envoy
# keeps open up to deferred_close_timeout after the request) and the model-server cluster every
# in-flight generation, so both would start failing requests with 500/503 at moderate load.
# Concurrent retries stay bounded (a retry storm is the one thing a breaker should stop), but above
# what one frozen engine can hold: the picker sends it at most --max-requests-per-scrape requests
# (docs/picker.md, flag table) before its scrapes fail, and each is retried after the per-try idle
# timeout; at 16 concurrent retries, 15 of the 32 retried there got 504 (`smetric chaos` row "endpoint SIGSTOP: 44 next turns ... at once").
MAX_CONCURRENT_RETRIES = 64
_UNLIMITED = 1 << 30
CIRCUIT_BREAKERS = {
    "thresholds": [
        {
            "max_connections": _UNLIMITED,
            "max_pending_requests": _UNLIMITED,
            "max_requests": _UNLIMITED,
            "max_retries": MAX_CONCURRENT_RETRIES,
        }
    ]
}


def _static_cluster(
    name: str,
    host: str,
    port: int,
    connect_timeout_s: float,
    h2: bool,
    keepalive_s: float = 0.0,
    more_ports: tuple[int, ...] = (),
) -> dict[str, Any]:
    hosts = [{"endpoint": {"address": _socket(host, p)}} for p in (port, *more_ports)]
    cluster: dict[str, Any] = {
        "name": name,
        "type": "STATIC",
        "circuit_breakers": CIRCUIT_BREAKERS,
        "connect_timeout": _secs(connect_timeout_s),
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": hosts}]},
    }
    if h2:
        h2_options: dict[str, Any] = {}
        if keepalive_s > 0:
            h2_options["connection_keepalive"] = picker_keepalive(keepalive_s, keepalive_s)
        cluster["typed_extension_protocol_options"] = {
            _HTTP_OPTS: {
                "@type": _HTTP_OPTS_TYPE,
                "explicit_http_config": {"http2_protocol_options": h2_options},
            }
        }
    return cluster


def _trailer_mode(body_mode: BodyMode) -> str:
    # FULL_DUPLEX_STREAMED needs the trailers too, so the processor sees the end of the stream.
    return "SEND" if body_mode == "FULL_DUPLEX_STREAMED" else "SKIP"


def ext_proc_filter(o: EnvoyOptions) -> dict[str, Any]:
    """The routing filter (with ``response_path="observer"`` it sees the request only)."""
    inline = o.response_path == "inline"
    response_body_mode = o.response_body_mode if inline else "NONE"
    return {
        "name": "envoy.filters.http.ext_proc",
        "typed_config": {
            **_ext_proc_common(o),
            "failure_mode_allow": o.failure_mode_allow,
            "allow_mode_override": True,
            # the client connection, for the picker's per-connection share of the body budget
            "request_attributes": [CONNECTION_ID],
            "processing_mode": {
                "request_header_mode": "SEND",
                "response_header_mode": "SEND" if inline else "SKIP",
                "request_body_mode": o.request_body_mode,
                "response_body_mode": response_body_mode,
                "request_trailer_mode": _trailer_mode(o.request_body_mode),
                "response_trailer_mode": _trailer_mode(response_body_mode) if inline else "SKIP",
            },
        },
    }


def observer_filter(o: EnvoyOptions) -> dict[str, Any]:
    """The response observer: send and go, after the routing filter (it sees the routed headers)."""
    return {
        "name": "smetric.response_observer",
        "typed_config": {
            **_ext_proc_common(o),
            "observability_mode": True,
            "failure_mode_allow": True,  # observing must never fail a request
            "processing_mode": {
                "request_header_mode": "SEND",
                "response_header_mode": "SEND",
                "request_body_mode": "NONE",
                "response_body_mode": "STREAMED",
                "request_trailer_mode": "SKIP",
                "response_trailer_mode": "SKIP",
            },
        },
    }


def picker_stream_retry(retries: int) -> dict[str, Any]:
    """GrpcService.retry_policy of the ext_proc stream: a picker replica that is gone (killed,
    restarting) refuses the connection, and the stream is opened again on another replica of the
    picker cluster (previous_hosts) before the request fails. A stream that already reached a
    picker is not retried (its decision may have been made)."""
    return {
        "retry_on": "connect-failure,refused-stream,unavailable",
        "num_retries": retries,
        "retry_back_off": {"base_interval": "0.025s", "max_interval": "0.25s"},
        "retry_host_predicate": [
            {
                "name": "envoy.retry_host_predicates.previous_hosts",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"
                },
            }
        ],
        "host_selection_retry_max_attempts": 3,
    }


# A replica whose connections fail is left out for a while (new streams go to the others at once
# instead of retrying it first); at most half the replicas, so one picker is never ejected.
PICKER_EJECTION: dict[str, Any] = {
    "outlier_detection": {
        "split_external_local_origin_errors": True,
        "consecutive_local_origin_failure": 2,
        "enforcing_consecutive_local_origin_failure": 100,
        "interval": "0.5s",
        "base_ejection_time": "2s",
        "max_ejection_percent": 50,
    }
}


def _ext_proc_common(o: EnvoyOptions) -> dict[str, Any]:
    return {
        "@type": _EXT_PROC,
        "grpc_service": {
            "envoy_grpc": {"cluster_name": "picker"},
            "timeout": _secs(o.message_timeout_s),
            **(
                {"retry_policy": picker_stream_retry(o.picker_stream_retries)}
                if o.picker_stream_retries
                else {}
            ),
        },
        "message_timeout": _secs(o.message_timeout_s),
        "metadata_options": {
            "forwarding_namespaces": {"untyped": [SUBSET_NAMESPACE, "envoy.lb"]},
            "receiving_namespaces": {"untyped": ["envoy.lb"]},
        },
    }


_SERVED_BY = {
    "response_headers_to_add": [
        {"header": {"key": "x-smetric-served-by", "value": "%UPSTREAM_REMOTE_ADDRESS%"}}
    ]
}


def _listener(
    name: str,
    host: str,
    port: int,
    filters: list[dict[str, Any]],
    cluster: str,
    o: EnvoyOptions,
    retries: int = 0,
) -> dict[str, Any]:
    route: dict[str, Any] = {
        "cluster": cluster,
        "timeout": _secs(o.route_timeout_s),
        "idle_timeout": _secs(o.stream_idle_timeout_s),
    }
    if retries:
        route["retry_policy"] = retry_policy(retries, o.per_try_idle_timeout_s, o.retry_on_status)
    return {
        "name": name,
        "address": _socket(host, port),
        "per_connection_buffer_limit_bytes": o.buffer_limit_bytes,
        "filter_chains": [
            {
                "filters": [
                    {
                        "name": "envoy.filters.network.http_connection_manager",
                        "typed_config": {
                            "@type": _HCM,
                            "stat_prefix": name,
                            "codec_type": "AUTO",
                            "stream_idle_timeout": _secs(o.stream_idle_timeout_s),
                            **(codec_limits() if o.protocol_guard else {}),
                            **upload_bounds(
                                o.request_headers_timeout_s, o.request_timeout_s, o.max_concurrent_streams
                            ),
                            "route_config": {
                                "name": name,
                                "virtual_hosts": [
                                    {
                                        "name": name,
                                        "domains": ["*"],
                                        # x-envoy-attempt-count in the response: the picker's
                                        # outlier detection counts the attempts that failed
                                        "include_attempt_count_in_response": True,
                                        "routes": [
                                            {
                                                "match": {"prefix": "/"},
                                                "route": route,
                                                **(_SERVED_BY if o.served_by_header else {}),
                                            }
                                        ],
                                    }
                                ],
                            },
                            "http_filters": [
                                *filters,
                                {"name": "envoy.filters.http.router", "typed_config": {"@type": _ROUTER}},
                            ],
                        },
                    },
                ]
            }
        ],
    }


def bootstrap(o: EnvoyOptions) -> dict[str, Any]:
    ext_proc = ext_proc_filter(o)
    filters = [ext_proc]
    if not o.pool_endpoints:  # ORIGINAL_DST without a destination would loop back to this listener
        filters.append(destination_guard_filter())
    if o.response_path == "observer":
        filters.append(observer_filter(o))
    if o.subset_hint_header:
        lua_config = {"@type": _LUA, "default_source_code": {"inline_string": SUBSET_FROM_HEADER_LUA}}
        filters.insert(0, {"name": "envoy.filters.http.lua", "typed_config": lua_config})
    filters.insert(0, scrub_filter(o.allowed_paths, keep=(SUBSET_KEY,) if o.subset_hint_header else ()))
    if o.protocol_guard:
        filters.insert(0, protocol_guard_filter(o.max_request_header_bytes, o.max_request_headers))
    upstream = "pool" if o.pool_endpoints else "original_destination"
    od_base: dict[str, Any] = {
        "circuit_breakers": CIRCUIT_BREAKERS,
        "connect_timeout": _secs(o.connect_timeout_s),
        "per_connection_buffer_limit_bytes": o.buffer_limit_bytes,
    }
    if o.pool_endpoints or not o.retries:
        original_dst = [
            {
                "name": "original_destination",
                "type": "ORIGINAL_DST",
                "lb_policy": "CLUSTER_PROVIDED",
                **od_base,
                "original_dst_lb_config": {"use_http_header": True, "http_header_name": PRIMARY_HEADER},
            }
        ]
    else:  # each retry on the next fallback: one ORIGINAL_DST cluster per attempt
        filters.insert(filters.index(ext_proc) + 1, fallback_headers_filter(o.retries))
        original_dst = original_dst_retry_clusters("original_destination", o.retries, PRIMARY_HEADER, od_base)
    listeners = [_listener("gateway", o.listen_host, o.listen_port, filters, upstream, o, o.retries)]
    clusters: list[dict[str, Any]] = [
        *original_dst,
        _static_cluster(
            "picker",
            o.picker_host,
            o.picker_port,
            o.connect_timeout_s,
            h2=True,
            keepalive_s=o.picker_keepalive_s,
            more_ports=o.more_picker_ports,
        )
        | (PICKER_EJECTION if o.picker_ejection else {}),
    ]
    if o.pool_endpoints:
        clusters.append(
            pool_cluster(
                "pool", o.pool_endpoints, o.connect_timeout_s, CIRCUIT_BREAKERS, o.pool_outlier_detection
            )
        )
    if (o.direct_port is None) != (o.direct_backend is None):
        raise ValueError("direct_port and direct_backend go together")
    if o.direct_port is not None and o.direct_backend is not None:
        host, port = o.direct_backend.rsplit(":", 1)
        listeners.append(_listener("direct", o.listen_host, o.direct_port, [], "direct_backend", o))
        clusters.append(_static_cluster("direct_backend", host, int(port), o.connect_timeout_s, h2=False))
    config: dict[str, Any] = {
        "admin": {"address": _socket("127.0.0.1", o.admin_port)},
        "static_resources": {"listeners": listeners, "clusters": clusters},
    }
    if o.max_connections > 0:
        config["layered_runtime"] = connection_limits([ln["name"] for ln in listeners], o.max_connections)
    typed_bootstrap(config)  # envoy-data-plane's typed messages: a misspelt field fails here
    return config
