"""The picker's command-line flags: the single definition the picker parses and the operator renders.

In the shared core because two subsystems need it: the operator (:mod:`smetric.operator.render_picker`)
imports :func:`render_args` to build the picker container's ``args`` (agreeing in code, not by
convention); the picker (:mod:`smetric.epp.main`) builds its ``argparse`` parser from the same
table and turns the parsed flags into its typed settings (:mod:`smetric.epp.settings`).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from smetric.core.argparsing import OneLineErrors
from smetric.core.version import version_line
from smetric.policy.registry import default_policy, default_policy_words


def parse_bool(text: str) -> bool:
    """Go-style boolean flag values (``--secure-serving=false``, ``--secure-serving false``)."""
    value = text.strip().lower()
    if value in ("1", "t", "true", "yes", "on"):
        return True
    if value in ("0", "f", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean (true/false)")


def default_bind_address() -> str:
    """Every interface inside a Kubernetes pod (``KUBERNETES_SERVICE_HOST`` is set there: the pod
    network is the boundary, as for the upstream picker), loopback anywhere else (a workstation or
    a shared host, where 0.0.0.0 would expose the picker to the whole network)."""
    return "0.0.0.0" if os.environ.get("KUBERNETES_SERVICE_HOST") else "127.0.0.1"


# --refresh-prometheus-metrics-interval unset: upstream's default (1s), used by PickerSettings.
POOL_GAUGE_INTERVAL_S = 1.0
# --drain-timeout unset: how long open ext_proc streams get after SIGTERM (the operator's pod
# terminationGracePeriodSeconds, 130, covers it).
DRAIN_TIMEOUT_S = 10.0
REFRESH_INTERVAL_MS = 50  # --refresh-interval-ms
MAX_REQUESTS_PER_SCRAPE = 32  # --max-requests-per-scrape


@dataclass(frozen=True, slots=True)
class Flag:
    name: str  # without leading dashes; also the argparse dest (dashes -> underscores)
    type: type
    default: object
    help: str
    aliases: tuple[str, ...] = ()  # other accepted spellings (upstream picker names)
    # the only values accepted (argparse refuses any other in one line; render_args raises): the one
    # place a flag's allowed values are written
    choices: tuple[str, ...] = ()


FLAGS: tuple[Flag, ...] = (
    Flag("grpc-port", int, 9002, "ext_proc gRPC port (h2c)"),
    Flag("grpc-health-port", int, 9003, "grpc.health.v1 port"),
    Flag("metrics-port", int, 9090, "Prometheus metrics port"),
    Flag(
        "config",
        str,
        "",
        "config YAML file: the picker's own format or an upstream EndpointPickerConfig; empty = "
        f"{default_policy(False)} with its defaults. A config whose policy names none gets "
        + default_policy_words(
            "{on} too, with or without globalFetchSPerToken (a global KV tier)",
            "{on} when its parameters set globalFetchSPerToken (a global KV tier), else {off}",
        ),
        aliases=("config-file",),
    ),
    Flag("endpoints", str, "", "standalone mode: comma-separated ip:port list, or @FILE with one per line"),
    Flag("pool-name", str, "", "Kubernetes mode: InferencePool name to watch"),
    Flag(
        "pool-namespace",
        str,
        os.environ.get("NAMESPACE") or "default",
        "Kubernetes mode: InferencePool namespace (default: $NAMESPACE, else default)",
    ),
    Flag(
        "pool-group",
        str,
        "inference.networking.k8s.io",
        "Kubernetes mode: InferencePool API group (only InferencePool inference.networking.k8s.io/v1)",
        choices=("inference.networking.k8s.io",),
    ),
    Flag(
        "prefix-index",
        str,
        "auto",
        "prefix index: precise (tokenizer + KV events) | approximate | auto: precise when --tokenizer "
        "names the engines' tokenizer (their KV events hash its tokens), else approximate",
        choices=("auto", "precise", "approximate"),
    ),
    Flag("tokenizer", str, "", "precise index: path or name of the model's tokenizer"),
    Flag("kv-events-port", int, 5557, "ZMQ port each model server publishes KV events on"),
    Flag(
        "kv-events-max-message-bytes",
        int,
        4 * 1024 * 1024,
        "a larger KV-event message is dropped (a gap: that endpoint resynchronises); 0 = no limit",
    ),
    Flag("refresh-interval-ms", int, REFRESH_INTERVAL_MS, "metrics scrape interval per endpoint"),
    Flag("staleness-threshold-ms", int, 2000, "metrics older than this mark an endpoint stale (saturated)"),
    Flag(
        "max-requests-per-scrape",
        int,
        MAX_REQUESTS_PER_SCRAPE,
        "an endpoint sent this many requests since its last successful metrics scrape counts as stale "
        "until a newer scrape answers: bounds what a frozen engine receives before its scrapes time out "
        f"(the default is {MAX_REQUESTS_PER_SCRAPE * 1000 // REFRESH_INTERVAL_MS} req/s per engine at the "
        "default --refresh-interval-ms); 0 = no bound",
    ),
    Flag(
        "outlier-consecutive-errors",
        int,
        3,
        "an endpoint that answers this many errors in a row (5xx, 429, or an attempt the gateway "
        "retried elsewhere) is ejected from routing: it draws no request until its ejection time is "
        "over, then one probe, whose success readmits it; 0 = off (Envoy's consecutive_5xx is 5)",
    ),
    Flag(
        "outlier-ejection-ms",
        int,
        10_000,
        "first ejection time; each further ejection soon after a readmission (or a failed probe) is "
        "this times the number of ejections (Envoy's base_ejection_time is 30 s)",
    ),
    Flag(
        "outlier-max-ejection-ms",
        int,
        300_000,
        "longest ejection, also the cap on an engine's Retry-After (Envoy's max_ejection_time)",
    ),
    Flag("max-body-bytes", int, 16 * 1024 * 1024, "requests larger than this get 413"),
    Flag(
        "body-budget-bytes",
        int,
        64 * 1024 * 1024,
        "request bodies buffered by all streams together; past it a request gets 503",
    ),
    Flag(
        "parse-processes",
        int,
        2,
        "bodies of 1 MiB or more are parsed and keyed in this many worker processes (each loads the "
        "tokenizer; the event loop only copies bytes); 0 = threads in the picker process, whose event "
        "loop then stalls while a many-message body is parsed (the parse holds the GIL)",
    ),
    Flag(
        "max-inflight-decisions",
        int,
        512,
        "requests waiting for a routing decision (headers arrived, not yet routed); past it 503 + retry-after",
    ),
    Flag(
        "decision-budget-ms",
        int,
        10_000,
        "longest time from a request's headers to its decision (body upload + parse + policy); past it "
        "503 + retry-after",
    ),
    Flag(
        "bind-address",
        str,
        default_bind_address(),
        "address every listener binds (ext_proc, health, metrics, snapshot); default: 0.0.0.0 in a "
        "Kubernetes pod (the gateway reaches it over the pod network), else 127.0.0.1",
    ),
    Flag(
        "event-loop",
        str,
        "auto",
        "asyncio event loop: auto (uvloop when installed, else asyncio) | uvloop | asyncio",
        choices=("auto", "uvloop", "asyncio"),
    ),
    Flag("scrape-timeout-ms", int, 1000, "timeout of one /metrics scrape"),
    Flag("scrape-max-bytes", int, 4 * 1024 * 1024, "a larger /metrics page is refused (endpoint goes stale)"),
    Flag("state-file", str, "", "prefix index snapshot: written periodically and at exit, read at start"),
    Flag("state-interval-ms", int, 2000, "how often --state-file is written"),
    Flag("snapshot-port", int, 0, "serve GET /snapshot (the index) for peer replicas; 0 = off"),
    Flag("peers", str, "", "host:port,... of peer replicas' --snapshot-port: fetched at start-up"),
    Flag(
        "response-affinity-entries",
        int,
        100_000,
        "Responses follow-ups: remember this many response id -> engine entries (LRU, also bounded to "
        "32 MiB) and route a request naming previous_response_id to that engine; snapshotted with the "
        "index; 0 = off (follow-ups routed by the policy)",
    ),
    Flag("hash-seed", str, "0", "PYTHONHASHSEED shared with the engines (precise block hashes)"),
    Flag(
        "hash-algo",
        str,
        "sha256",
        "engines' --prefix-caching-hash-algo: sha256 | sha256_cbor (precise index)",
        choices=("sha256", "sha256_cbor"),  # smetric.core.blockhash.HASH_ALGOS (a test keeps them equal)
    ),
    Flag("block-size", int, 16, "engine KV block size in tokens (precise index)"),
    Flag(
        "response-path",
        str,
        "inline",
        "inline: the response passes through this stream (GIE gateways) | observer: a second ext_proc "
        "filter in observability_mode reports it and Envoy never waits for the picker on responses",
        choices=("inline", "observer"),
    ),
    Flag(
        "destination-list",
        str,
        "all",
        "what x-gateway-destination-endpoint and its envoy.lb metadata carry: all = the primary, "
        "then the fallbacks a gateway's retries walk (override_host: Istio, the bundled Envoy); "
        "primary = the primary alone, for a gateway whose pool cluster is ORIGINAL_DST on that "
        "header (Envoy AI Gateway, kgateway), which reads one ip:port and answers 503 to a list",
        choices=("all", "primary"),
    ),
    Flag("log-level", str, "info", "debug | info | warning | error"),
    Flag(
        "secure-serving",
        bool,
        True,
        "serve ext_proc over TLS (as the upstream picker): the certificate in --cert-path, else a "
        "self-signed one made at start-up; false = plaintext h2c",
    ),
    Flag(
        "cert-path", str, "", "directory with tls.crt and tls.key for --secure-serving (empty = self-signed)"
    ),
    Flag(
        "v",
        int,
        -1,
        "log verbosity as upstream (klog): >= 4 debug, 2-3 info, 0-1 warning; overrides --log-level",
    ),
    Flag("zap-encoder", str, "json", "log encoding: json | console", choices=("json", "console")),
    Flag(
        "decision-log",
        bool,
        False,
        "log one line per routing decision (request id, reason, endpoint, top scores) at info level; "
        "toggle at runtime with SIGUSR1",
    ),
)

# Upstream picker flags (GIE ``cmd/epp/runner/runner.go`` v1.0.0, ``pkg/epp/server/options.go``
# v1.5.0) with their upstream meaning here. The picker's own names above stay the primary ones;
# these set the same things in upstream's units (Go durations such as ``50ms``).
UPSTREAM_FLAGS: tuple[Flag, ...] = (
    Flag("config-text", str, "", "the config as text, in lieu of --config-file (either format)"),
    Flag(
        "ha-enable-leader-election",
        bool,
        False,
        "elect a leader through a coordination.k8s.io Lease; only the leader reports ready, so only it "
        "gets traffic (Kubernetes mode only)",
    ),
    Flag(
        "metrics-endpoint-auth",
        bool,
        None,
        "metrics need a bearer token that passes a TokenReview and a SubjectAccessReview (get "
        "/metrics); default: on with --pool-name, off with --endpoints (true there is refused)",
    ),
    Flag("health-checking", bool, False, "also serve grpc.health.v1 on the ext_proc port"),
    Flag(
        "disable-endpoint-subset-filter",
        bool,
        False,
        "ignore the gateway's x-gateway-destination-endpoint-subset hint",
    ),
    Flag("refresh-metrics-interval", str, "", "Go duration; when set, replaces --refresh-interval-ms"),
    Flag("metrics-staleness-threshold", str, "", "Go duration; when set, replaces --staleness-threshold-ms"),
    Flag(
        "refresh-prometheus-metrics-interval",
        str,
        "",
        "Go duration: how often the pool gauges (ready pods, average queue and KV use) are refreshed "
        f"(default {POOL_GAUGE_INTERVAL_S:g}s)",
    ),
    Flag("zap-log-level", str, "", "debug | info | warn | error | an integer level; used when --v is unset"),
    Flag("zap-devel", bool, False, "zap development mode: console encoding and debug level"),
    Flag(
        "kubeconfig",
        str,
        "",
        "kubeconfig for Kubernetes mode outside a cluster (controller-runtime's flag); default: "
        "$KUBECONFIG, then ~/.kube/config",
    ),
    # Accepted only with values that mean what this picker does; any other value is refused at
    # start-up with the reason (smetric.epp.upstream.flags).
    Flag(
        "drain-timeout",
        str,
        "",
        "Go duration: after SIGTERM the picker reports NOT_SERVING, releases its Lease, stops taking new "
        f"ext_proc streams and gives open ones this long (default {DRAIN_TIMEOUT_S:g}s; llm-d-router "
        "v0.10 keeps accepting new streams during its 30s)",
    ),
    Flag(
        "grpc-max-recv-msg-size",
        str,
        "",
        "largest ext_proc message received (10MiB, 25MB, 1048576); default: --max-body-bytes + 1 MiB "
        "(a BUFFERED body is one message)",
    ),
    Flag(
        "grpc-max-send-msg-size",
        str,
        "",
        "largest ext_proc message sent (10MiB, 25MB); default: gRPC's (no limit)",
    ),
    Flag("tls-min-version", str, "", "VersionTLS12 only (gRPC's own minimum; other values are refused)"),
    Flag("tls-cipher-suites", str, "", "not configurable in the Python gRPC server; a value is refused"),
    Flag(
        "emit-endpoint-scores",
        bool,
        False,
        "scores in envoy.lb dynamic metadata: not implemented, true refused",
    ),
    Flag("metrics-cert-dir", str, "", "TLS on the metrics port is not implemented; a value is refused"),
    Flag(
        "metrics-client-ca-file", str, "", "mTLS on the metrics port is not implemented; a value is refused"
    ),
    Flag("endpoint-selector", str, "", "upstream standalone mode; refused (use --endpoints)"),
    Flag("endpoint-target-ports", str, "", "upstream standalone mode; refused (use --endpoints)"),
    Flag("total-queued-requests-metric", str, "", "only vllm:num_requests_waiting is read"),
    Flag("total-running-requests-metric", str, "", "only vllm:num_requests_running is read"),
    Flag("kv-cache-usage-percentage-metric", str, "", "only vllm:kv_cache_usage_perc is read"),
    Flag("lora-info-metric", str, "", "LoRA routing is not implemented; empty or vLLM's name"),
    Flag("cache-info-metric", str, "", "only vllm:cache_config_info is read"),
    Flag("model-server-metrics-port", str, "", "metrics are scraped on the target port; other ports refused"),
    Flag("model-server-metrics-path", str, "", "only /metrics"),
    Flag("model-server-metrics-scheme", str, "", "only http"),
    Flag(
        "model-server-metrics-https-insecure-skip-verify", bool, True, "only meaningful with https (refused)"
    ),
    Flag("enable-cert-reload", bool, False, "certificates are read once at start-up; true is refused"),
)

# Upstream diagnostics without an equivalent here: accepted, logged once at start-up when set.
UPSTREAM_IGNORED: tuple[Flag, ...] = (
    Flag("tracing", bool, False, "upstream OpenTelemetry tracing switch (not implemented)"),
    Flag("enable-pprof", bool, False, "upstream Go profiling switch"),
    Flag("zap-stacktrace-level", str, "", "upstream zap stack trace level"),
    Flag("zap-time-encoding", str, "", "upstream zap time encoding"),
    Flag(
        "enable-grpc-stream-metrics",
        bool,
        False,
        "llm-d-router's ext_proc stream metrics (not exported here)",
    ),
    Flag(
        "allow-experimental-plugins",
        bool,
        False,
        "llm-d-router's alpha-plugin gate (no plugin is gated here)",
    ),
)


def _add(parser: argparse.ArgumentParser | argparse._ArgumentGroup, flag: Flag) -> None:
    names = [f"--{flag.name}", *(f"--{alias}" for alias in flag.aliases)]
    dest = flag.name.replace("-", "_")
    if flag.type is bool:  # --flag, --flag=true|false, --flag true|false (Go and the upstream chart)
        parser.add_argument(
            *names, dest=dest, type=parse_bool, nargs="?", const=True, default=flag.default, help=flag.help
        )
    else:
        parser.add_argument(
            *names,
            dest=dest,
            type=flag.type,
            default=flag.default,
            help=flag.help,
            choices=flag.choices or None,
        )


class _DefaultsOnce(argparse.ArgumentDefaultsHelpFormatter):
    """Appends ``(default: ...)`` only to help texts that do not state their default themselves."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        return text if "default" in text else super()._get_help_string(action) or text


def build_parser(prog: str = "smetric-epp") -> argparse.ArgumentParser:
    parser = OneLineErrors(
        prog=prog,
        description="SMetric endpoint picker (Envoy ext_proc)",
        formatter_class=_DefaultsOnce,
    )
    parser.add_argument("--version", action="version", version=version_line(prog))
    for flag in FLAGS:
        _add(parser, flag)
    own = {f.name for f in FLAGS}
    upstream = parser.add_argument_group("upstream picker flags, with their upstream meaning")
    for flag in UPSTREAM_FLAGS:
        if flag.name not in own:
            _add(upstream, flag)
    ignored = parser.add_argument_group("upstream picker flags accepted for compatibility (no effect)")
    for flag in UPSTREAM_IGNORED:
        if flag.name not in own:
            _add(ignored, flag)
    return parser


def ignored_upstream_flags(args: argparse.Namespace) -> list[str]:
    """The upstream-only flags set to a non-default value (logged once at start-up)."""
    own = {f.name for f in FLAGS}
    return [
        f.name
        for f in UPSTREAM_IGNORED
        if f.name not in own and getattr(args, f.name.replace("-", "_"), f.default) != f.default
    ]


def render_args(values: dict[str, object]) -> list[str]:
    """``{"pool-name": "p"} -> ["--pool-name=p"]``; unknown names raise ``KeyError``, a value
    outside the flag's ``choices`` raises ``ValueError`` (the picker would refuse it at start-up)."""
    table = {f.name: f for f in (*FLAGS, *UPSTREAM_FLAGS)} | {a: f for f in FLAGS for a in f.aliases}
    out: list[str] = []
    for name, value in values.items():
        if name not in table:
            raise KeyError(f"unknown picker flag {name!r}")
        allowed = table[name].choices
        if allowed and str(value) not in allowed:
            raise ValueError(f"picker flag --{name}={value}: not one of {', '.join(allowed)}")
        out.append(f"--{name}={value}")
    return out
