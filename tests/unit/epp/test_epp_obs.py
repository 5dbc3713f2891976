"""Metrics registry per instance, KV-gap callback, health status, JSON logs, main's exit codes."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from prometheus_client import CollectorRegistry

from smetric.epp.main import main
from smetric.epp.obs.health import NOT_SERVING, SERVING, HealthReporter, wait_serving
from smetric.epp.obs.logging import JsonFormatter, configure_logging
from smetric.epp.obs.metrics import KvEventGapCounter, PickerMetrics
from smetric.epp.server.static import StaticEndpointSource


def test_two_metric_sets_do_not_collide_and_gaps_are_counted() -> None:
    a, b = PickerMetrics(CollectorRegistry()), PickerMetrics(CollectorRegistry())
    gaps = KvEventGapCounter(a)
    gaps.on_gap("10.0.0.1:8000")
    gaps.on_gap("10.0.0.1:8000")
    assert a.registry.get_sample_value("smetric_epp_kv_event_gaps_total", {"endpoint": "10.0.0.1:8000"}) == 2
    assert (
        b.registry.get_sample_value("smetric_epp_kv_event_gaps_total", {"endpoint": "10.0.0.1:8000"}) is None
    )


async def test_health_liveness_serves_once_started_readiness_once_synced_and_not_while_draining() -> None:
    """Upstream semantics (GIE cmd/epp/runner/health.go): liveness never depends on endpoints, so a
    pool whose engines are all loading does not restart the picker; readiness = discovery synced."""
    source = StaticEndpointSource([])
    metrics = PickerMetrics(CollectorRegistry())
    synced = [False]
    health = HealthReporter(source, metrics, is_stale=lambda a: a.endswith(":2"), synced=lambda: synced[0])

    async def status(service: str = "") -> int:
        await health.refresh()
        reply = await health.servicer.Check(_req(service), None)
        return int(reply.status)

    for name in ("", "readiness", "inference-extension", "envoy.service.ext_proc.v3.ExternalProcessor"):
        assert await status(name) == NOT_SERVING
    assert await status("liveness") == SERVING  # not synced, no endpoints: still alive
    synced[0] = True
    for name in ("", "readiness", "inference-extension", "envoy.service.ext_proc.v3.ExternalProcessor"):
        assert await status(name) == SERVING  # synced with zero ready endpoints: ready (answers 503)
    source.set_endpoints(["10.0.0.1:1", "10.0.0.1:2"])
    assert await status() == SERVING
    assert metrics.registry.get_sample_value("smetric_epp_stale_endpoints") == 1
    await health.drain()
    assert await status() == NOT_SERVING
    assert await status("liveness") == NOT_SERVING


async def test_wait_serving_returns_once_serving_and_times_out_naming_the_last_status() -> None:
    import grpc
    from grpc_health.v1 import health_pb2_grpc

    source = StaticEndpointSource([])
    synced = [False]
    health = HealthReporter(
        source, PickerMetrics(CollectorRegistry()), is_stale=lambda a: False, synced=lambda: synced[0]
    )
    await health.refresh()
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.servicer, server)
    target = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    await server.start()
    try:
        with pytest.raises(TimeoutError, match=r"^NOT_SERVING$"):
            await wait_serving(target, 0.3, poll_s=0.05)

        def died() -> None:
            raise RuntimeError("picker exited")

        with pytest.raises(RuntimeError, match="picker exited"):
            await wait_serving(target, 5.0, died)
        synced[0] = True
        await health.refresh()
        await wait_serving(target, 5.0, poll_s=0.05)
    finally:
        await server.stop(None)


def _req(service: str) -> object:
    from grpc_health.v1 import health_pb2

    return health_pb2.HealthCheckRequest(service=service)


@pytest.mark.usefixtures("restore_root_logger")
def test_json_log_lines_carry_extra_fields() -> None:
    record = logging.LogRecord("smetric.epp", logging.INFO, __file__, 1, "routed %s", ("x",), None)
    record.destination = "10.0.0.1:8000"
    doc = orjson.loads(JsonFormatter().format(record))
    assert doc["msg"] == "routed x" and doc["destination"] == "10.0.0.1:8000" and doc["level"] == "info"
    with pytest.raises(ValueError):
        configure_logging("loud")


@pytest.fixture
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("restore_root_logger")
def test_main_rejects_bad_flags_and_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "--endpoints" in capsys.readouterr().err
    bad = tmp_path / "epp.yaml"
    bad.write_text("policy: {name: nope}\n")
    assert main(["--endpoints", "127.0.0.1:1", "--config", str(bad)]) == 2
    assert "policy.name" in capsys.readouterr().err
    assert main(["--endpoints", "127.0.0.1:1", "--log-level", "loud"]) == 2
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["--endpoints", "127.0.0.1:1", "--response-path", "sideways"])
    assert exited.value.code == 2
    assert "--response-path: invalid choice: 'sideways'" in capsys.readouterr().err


@pytest.mark.usefixtures("restore_root_logger")
def test_smetric_epp_subcommand_dispatches_to_the_picker(capsys: pytest.CaptureFixture[str]) -> None:
    from smetric.core.cli import main as smetric_main

    assert smetric_main(["epp"]) == 2
    assert "--endpoints" in capsys.readouterr().err
