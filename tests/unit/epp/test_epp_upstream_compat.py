"""smetric-epp as a drop-in for the upstream picker: the upstream inferencepool chart's argument list,
its health service names, TLS by default (self-signed or mounted), ``--secure-serving=false``."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from smetric.core import ports
from smetric.core.pickerflags import build_parser, ignored_upstream_flags, render_args
from smetric.epp.server.tls import TlsError, load_cert_dir, self_signed, server_key_pair

# What GIE's config/charts/inferencepool/templates/epp-deployment.yaml renders (1 replica, default
# values, plus the chart's `inferenceExtension.flags` map entries as `--key value` pairs).

UPSTREAM_ARGS = [
    "--pool-name", "pool", "--pool-namespace", "team-a",
    "--zap-encoder", "json", "--config-file", "CONFIG",
    "--v", "1", "--tracing=false", "--metrics-endpoint-auth=false",
]  # fmt: skip


# GIE v1.0.0 config/charts/inferencepool/templates/epp-config.yaml, default-plugins.yaml.
GIE_CHART_CONFIG = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: kv-cache-utilization-scorer
  - pluginRef: prefix-cache-scorer
"""


def test_the_upstream_chart_argument_list_parses_onto_our_flags() -> None:
    args = build_parser().parse_args(
        [*UPSTREAM_ARGS, "--ha-enable-leader-election", "--secure-serving", "false"]
    )
    assert args.config == "CONFIG" and args.pool_name == "pool" and args.pool_namespace == "team-a"
    assert args.v == 1 and args.zap_encoder == "json" and args.secure_serving is False
    assert args.pool_group == "inference.networking.k8s.io"
    assert args.ha_enable_leader_election is True and args.metrics_endpoint_auth is False
    assert ignored_upstream_flags(args) == []  # --tracing=false is its default here
    defaults = build_parser().parse_args([])
    assert defaults.secure_serving is True  # TLS by default, as upstream
    # our own names stay as aliases, and the operator may render either spelling
    assert build_parser().parse_args(["--config=/x"]).config == "/x"
    assert render_args({"config-file": "/c", "secure-serving": "false"}) == [
        "--config-file=/c",
        "--secure-serving=false",
    ]


def test_help_shows_the_default_ports() -> None:
    text = build_parser().format_help()
    assert "default: 9002" in text and "default: 9003" in text and "default: 9090" in text


def test_self_signed_and_mounted_certificates(tmp_path: Path) -> None:
    key, cert = self_signed("picker")
    assert key.startswith(b"-----BEGIN PRIVATE KEY") and cert.startswith(b"-----BEGIN CERTIFICATE")
    (tmp_path / "tls.key").write_bytes(key)
    (tmp_path / "tls.crt").write_bytes(cert)
    assert load_cert_dir(str(tmp_path)) == (key, cert)
    assert server_key_pair(False, "") is None
    with pytest.raises(TlsError, match=r"tls\.crt"):
        load_cert_dir(str(tmp_path / "missing"))


def _tls_alpn(port: int) -> str | None:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, ctx.wrap_socket(raw) as tls:
        return tls.selected_alpn_protocol()


async def _status(port: int, service: str) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        reply = await health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=2
        )
        return int(reply.status)


async def test_the_picker_starts_with_the_upstream_chart_arguments(tmp_path: Path) -> None:
    """Kubernetes mode against an API server that is down: the picker starts on the chart's own
    EndpointPickerConfig and flags, serves TLS on the ext_proc port, liveness is SERVING and
    readiness NOT_SERVING (the pool has not synced)."""
    config = tmp_path / "config.yaml"
    config.write_text(GIE_CHART_CONFIG)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n"
    )
    grpc_port, health_port, metrics_port = ports.free_port(), ports.free_port(), ports.free_port()
    argv = [a if a != "CONFIG" else str(config) for a in UPSTREAM_ARGS]
    argv += [
        "--grpc-port",
        str(grpc_port),
        "--grpc-health-port",
        str(health_port),
        "--metrics-port",
        str(metrics_port),
        "--health-checking",
        "--disable-endpoint-subset-filter",
        "true",
        "--refresh-metrics-interval",
        "50ms",
    ]
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "smetric.epp.main", *argv], env=env, stderr=subprocess.PIPE
    )
    try:
        live = None
        for _ in range(100):
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                live = await _status(health_port, "liveness")
                break
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.1)
        assert live == health_pb2.HealthCheckResponse.SERVING
        for service in ("readiness", "inference-extension", ""):
            assert await _status(health_port, service) == health_pb2.HealthCheckResponse.NOT_SERVING
        assert _tls_alpn(grpc_port) == "h2"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


async def test_decision_log_line_switches_at_runtime(serve: Any, caplog: pytest.LogCaptureFixture) -> None:
    """One line per decision (request id, reason, endpoint, ranked candidates), off by default and
    switched at runtime (SIGUSR1 calls toggle_decision_log)."""
    import logging

    from smetric.epp.obs.logging import DECISION_LOGGER, set_decision_log, toggle_decision_log
    from tests.support.epp_harness import BASE_HEADERS, body_msgs, build, chat, exchange, headers_msg

    servicer, *_ = build()
    stub = await serve(servicer)
    caplog.set_level(logging.INFO, logger="smetric.epp")
    set_decision_log(False)
    await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(chat())])
    assert not [r for r in caplog.records if r.name == DECISION_LOGGER]
    assert toggle_decision_log() is True
    await exchange(stub, [headers_msg({**BASE_HEADERS, "x-request-id": "r2"}), *body_msgs(chat())])
    (line,) = [r for r in caplog.records if r.name == DECISION_LOGGER]
    fields = line.__dict__
    assert line.getMessage() == "routed" and fields["request_id"] == "r2" and fields["reason"]
    assert fields["destination"] == fields["ranked"][0] and len(fields["ranked"]) >= 2
    assert toggle_decision_log() is False
