"""llm-d-router v0.10's picker flags are all accepted: with effect where this picker has the
mechanism (``--drain-timeout``, ``--grpc-max-recv-msg-size``, ``--grpc-max-send-msg-size``), as
documented no-ops logged at start-up (``--enable-grpc-stream-metrics``,
``--allow-experimental-plugins``), or refused with the reason for values it cannot honour (a TLS
version other than 1.2, cipher suites, metrics TLS, endpoint scores in Envoy metadata) and accepted
with the values that mean what it does."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

from smetric.core.pickerflags import build_parser, ignored_upstream_flags, render_args
from smetric.epp.server.app import PickerServer
from smetric.epp.settings import PickerSettings
from smetric.epp.upstream.flags import size_bytes
from tests.support.epp_harness import BASE_HEADERS, body_msgs, build, chat, headers_msg

# Every flag llm-d-router v0.10.0 registers (pkg/epp/server/options.go AddFlags, lines 164-240).
LLMD_ROUTER_V010_FLAGS = (
    "allow-experimental-plugins", "cache-info-metric", "cert-path", "config-file", "config-text",
    "disable-endpoint-subset-filter", "drain-timeout", "emit-endpoint-scores", "enable-cert-reload",
    "enable-grpc-stream-metrics", "enable-pprof", "endpoint-selector", "endpoint-target-ports",
    "grpc-health-port", "grpc-max-recv-msg-size", "grpc-max-send-msg-size", "grpc-port",
    "ha-enable-leader-election", "health-checking", "kv-cache-usage-percentage-metric", "lora-info-metric",
    "metrics-cert-dir", "metrics-client-ca-file", "metrics-endpoint-auth", "metrics-port",
    "metrics-staleness-threshold", "pool-group", "pool-name", "pool-namespace", "refresh-metrics-interval",
    "refresh-prometheus-metrics-interval", "secure-serving", "tls-cipher-suites", "tls-min-version",
    "total-queued-requests-metric", "total-running-requests-metric", "tracing",
)  # fmt: skip


def _settings(*argv: str) -> PickerSettings:
    return PickerSettings.from_argv(["--endpoints", "10.0.0.1:8000", "--metrics-endpoint-auth=false", *argv])


def test_every_llmd_router_flag_is_known() -> None:
    known = {o[2:] for a in build_parser()._actions for o in a.option_strings if o.startswith("--")}
    assert [f for f in LLMD_ROUTER_V010_FLAGS if f not in known] == []


def test_flags_with_effect() -> None:
    s = _settings("--drain-timeout=30s", "--grpc-max-recv-msg-size=10MiB", "--grpc-max-send-msg-size", "25MB")
    assert (s.drain_timeout_s, s.grpc_max_recv_bytes, s.grpc_max_send_bytes) == (30.0, 10 * 2**20, 25 * 10**6)
    d = _settings()
    assert d.grpc_max_recv_bytes == build_parser().parse_args([]).max_body_bytes + 2**20
    assert d.grpc_max_send_bytes == -1 and d.drain_timeout_s > 0
    assert _settings("--drain-timeout=0").drain_timeout_s == 0.0
    assert size_bytes("1048576") == 2**20 and size_bytes("2Gi") == 2 * 2**30 and size_bytes("512k") == 512_000
    # the operator can render them: the flag table is shared
    assert render_args({"drain-timeout": "30s"}) == ["--drain-timeout=30s"]


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--drain-timeout=soon"], "is not a duration"),
        (["--grpc-max-recv-msg-size=lots"], "is not a size"),
        (["--tls-min-version=VersionTLS13"], "sets no TLS version"),
        (["--tls-min-version=TLS1.3"], "expected one of VersionTLS10"),
        (["--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"], "not configurable"),
        (["--emit-endpoint-scores"], "not implemented"),
        (["--metrics-cert-dir=/certs"], "TLS on the metrics port is not implemented"),
    ],
)
def test_values_it_cannot_honour_are_refused_with_the_reason(argv: list[str], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        _settings(*argv)


def test_values_that_mean_what_it_does_are_accepted() -> None:
    _settings("--tls-min-version=VersionTLS12", "--emit-endpoint-scores=false", "--tls-cipher-suites=")


def test_documented_no_ops_are_logged() -> None:
    args = build_parser().parse_args(["--enable-grpc-stream-metrics", "--allow-experimental-plugins=true"])
    assert ignored_upstream_flags(args) == ["enable-grpc-stream-metrics", "allow-experimental-plugins"]


async def _status_of_a_stream(server: PickerServer) -> grpc.StatusCode | None:
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
            call = ep_grpc.ExternalProcessorStub(ch).Process()
            try:
                await call.write(headers_msg(BASE_HEADERS))
                for m in body_msgs(chat()):
                    await call.write(m)
                await call.read()
                await call.read()
                await call.done_writing()
            except grpc.aio.AioRpcError as exc:
                return exc.code()
            return None
    finally:
        await server.stop(grace_s=0.0)


async def test_the_message_limits_reach_the_ext_proc_server() -> None:
    def server(**limits: Any) -> PickerServer:
        servicer, *_ = build()
        return PickerServer(servicer, None, host="127.0.0.1", grpc_port=0, health_port=None, **limits)

    assert await _status_of_a_stream(server()) is None
    assert await _status_of_a_stream(server(max_message_bytes=64)) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert await _status_of_a_stream(server(max_send_message_bytes=8)) == grpc.StatusCode.RESOURCE_EXHAUSTED
