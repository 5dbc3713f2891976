"""Upstream picker flags: their values in this picker's terms, or the reason one is refused.

The flag table is :data:`smetric.core.pickerflags.UPSTREAM_FLAGS`. Durations are Go's
(``time.ParseDuration``: ``300ms``, ``1.5s``, ``2m30s``). A flag whose upstream meaning this
picker cannot give (another model server's metric names, the label-selector standalone mode,
https scraping, certificate reload) is refused at start-up with the reason, never ignored.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

_UNITS_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")

# vLLM's names: what the scraper reads (smetric.epp.scrape.parse); upstream's defaults for vLLM.
VLLM_METRICS = {
    "total-queued-requests-metric": "vllm:num_requests_waiting",
    "total-running-requests-metric": "vllm:num_requests_running",
    "kv-cache-usage-percentage-metric": "vllm:kv_cache_usage_perc",
    "lora-info-metric": "vllm:lora_requests_info",
    "cache-info-metric": "vllm:cache_config_info",
}
ZAP_LEVELS = {"debug": "debug", "info": "info", "warn": "warning", "error": "error", "dpanic": "error"}


def go_duration_s(text: str) -> float:
    """Seconds of a Go duration string; ``ValueError`` naming the text when it is not one."""
    s = text.strip()
    if s in ("0", "+0", "-0"):
        return 0.0
    sign = -1.0 if s.startswith("-") else 1.0
    body = s.lstrip("+-")
    pos, total = 0, 0.0
    while pos < len(body):
        m = _PART.match(body, pos)
        if m is None:
            raise ValueError(f"{text!r} is not a duration (e.g. 50ms, 2s, 1m30s)")
        total += float(m.group(1)) * _UNITS_S[m.group(2)]
        pos = m.end()
    if not body:
        raise ValueError(f"{text!r} is not a duration (e.g. 50ms, 2s, 1m30s)")
    return sign * total


_SIZE = re.compile(r"(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?")
_SIZE_UNITS = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}
TLS_MIN_VERSIONS = ("VersionTLS10", "VersionTLS11", "VersionTLS12", "VersionTLS13")


def size_bytes(text: str) -> int:
    """llm-d-router's message sizes (pkg/epp/server/options.go v0.10.0, ``sanitizeSizeString`` + a
    Kubernetes quantity): a trailing ``B``/``b`` dropped, then ``10Mi``, ``25M`` or bytes."""
    s = text.strip()
    if len(s) > 1 and s[-1] in "Bb":
        s = s[:-1]
    m = _SIZE.fullmatch(s)
    if m is None:
        raise ValueError(f"{text!r} is not a size (e.g. 10MiB, 25MB, 1048576)")
    return int(m.group(1)) * _SIZE_UNITS[m.group(2)]


@dataclass(frozen=True, slots=True)
class UpstreamFlags:
    """What the upstream flags resolve to (``None``: not set, the picker's own flag applies)."""

    refresh_interval_s: float | None
    staleness_s: float | None
    pool_gauge_interval_s: float | None
    metrics_auth: bool
    log_level: str | None  # from --zap-log-level / --zap-devel when --v is unset
    errors: tuple[str, ...]  # refused flags, each with its reason
    drain_timeout_s: float | None = None
    grpc_max_recv_bytes: int | None = None
    grpc_max_send_bytes: int | None = None


def resolve(args: argparse.Namespace) -> UpstreamFlags:
    errors: list[str] = []

    def duration(name: str, zero_ok: bool = False) -> float | None:
        text = getattr(args, name.replace("-", "_"))
        if not text:
            return None
        try:
            value = go_duration_s(text)
        except ValueError as exc:
            errors.append(f"--{name}: {exc}")
            return None
        if value < 0 or (value == 0 and not zero_ok):
            errors.append(f"--{name} must be {'non-negative' if zero_ok else 'positive'}, got {text!r}")
            return None
        return value

    def size(name: str) -> int | None:
        text = getattr(args, name.replace("-", "_"))
        if not text:
            return None
        try:
            return size_bytes(text)
        except ValueError as exc:
            errors.append(f"--{name}: {exc}")
            return None

    drain = duration("drain-timeout", zero_ok=True)
    max_recv, max_send = size("grpc-max-recv-msg-size"), size("grpc-max-send-msg-size")
    if args.tls_min_version not in ("", "VersionTLS12"):
        why = (
            "the Python gRPC server sets no TLS version: it accepts TLS 1.2 and 1.3"
            if args.tls_min_version in TLS_MIN_VERSIONS
            else f"expected one of {', '.join(TLS_MIN_VERSIONS)}"
        )
        errors.append(f"--tls-min-version={args.tls_min_version}: only VersionTLS12 is supported ({why})")
    if args.tls_cipher_suites:
        errors.append("--tls-cipher-suites: the Python gRPC server's cipher suites are not configurable")
    if args.emit_endpoint_scores:
        errors.append(
            "--emit-endpoint-scores: per-endpoint scores in the envoy.lb metadata are not implemented "
            "(the decision log, --decision-log, has the top candidates' scores)"
        )
    if args.metrics_cert_dir or args.metrics_client_ca_file:
        errors.append(
            "--metrics-cert-dir/--metrics-client-ca-file: TLS on the metrics port is not implemented "
            "(--metrics-endpoint-auth protects it with TokenReview and SubjectAccessReview)"
        )
    refresh = duration("refresh-metrics-interval")
    staleness = duration("metrics-staleness-threshold")
    gauges = duration("refresh-prometheus-metrics-interval")
    for name, vllm in VLLM_METRICS.items():
        value = getattr(args, name.replace("-", "_"))
        allowed = {"", vllm} | ({""} if name == "lora-info-metric" else set())
        if value not in allowed:
            errors.append(
                f"--{name}={value!r}: this picker reads vLLM's metrics only ({vllm}); "
                "other model servers' names are not supported"
            )
    if args.endpoint_selector or args.endpoint_target_ports:
        errors.append(
            "--endpoint-selector/--endpoint-target-ports (upstream standalone mode) are not supported; "
            "use --endpoints ip:port,... or --pool-name"
        )
    if args.model_server_metrics_path not in ("", "/metrics"):
        errors.append(
            f"--model-server-metrics-path={args.model_server_metrics_path!r}: only /metrics is scraped"
        )
    if args.model_server_metrics_scheme not in ("", "http"):
        errors.append(
            f"--model-server-metrics-scheme={args.model_server_metrics_scheme!r}: only http is scraped"
        )
    if args.model_server_metrics_port not in ("", "0"):
        errors.append(
            f"--model-server-metrics-port={args.model_server_metrics_port}: metrics are scraped on each "
            "endpoint's target port; a separate metrics port is not supported"
        )
    if args.enable_cert_reload:
        errors.append("--enable-cert-reload: certificates are read once at start-up; restart to rotate them")
    metrics_auth = args.metrics_endpoint_auth
    if metrics_auth is None:  # upstream's default (true) where there is a Kubernetes API to ask
        metrics_auth = bool(args.pool_name)
    elif metrics_auth and not args.pool_name:
        errors.append(
            "--metrics-endpoint-auth=true needs the Kubernetes API (TokenReview, SubjectAccessReview); "
            "with --endpoints there is none: set it to false or run with --pool-name"
        )
    if args.ha_enable_leader_election and not args.pool_name:
        errors.append(
            "--ha-enable-leader-election needs the Kubernetes API (a coordination.k8s.io Lease); "
            "it is available with --pool-name only"
        )
    if args.kubeconfig and not Path(args.kubeconfig).is_file():
        errors.append(f"--kubeconfig={args.kubeconfig}: no such file")
    level = None
    if args.zap_devel:
        level = "debug"
    if args.zap_log_level:
        text = args.zap_log_level.strip().lower()
        if text in ZAP_LEVELS:
            level = ZAP_LEVELS[text]
        elif text.isdigit():  # controller-runtime: an integer N is verbosity V(N), as --v
            level = "debug" if int(text) >= 4 else "info"
        else:
            errors.append(
                f"--zap-log-level={args.zap_log_level!r}: expected debug, info, warn, error or a number"
            )
    return UpstreamFlags(
        refresh, staleness, gauges, bool(metrics_auth), level, tuple(errors), drain, max_recv, max_send
    )
