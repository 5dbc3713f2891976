"""--event-loop: uvloop when installed (auto), asyncio on request, a clear error otherwise."""

from __future__ import annotations

import asyncio
import sys
from unittest import mock

import pytest

from smetric.epp.main import event_loop_factory, main


def test_auto_takes_uvloop_when_installed_and_asyncio_when_not() -> None:
    uvloop = pytest.importorskip("uvloop")
    factory = event_loop_factory("auto")
    assert factory is uvloop.new_event_loop
    loop = factory()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
    assert event_loop_factory("uvloop") is uvloop.new_event_loop
    assert event_loop_factory("asyncio") is None
    with mock.patch.dict(sys.modules, {"uvloop": None}):  # import uvloop raises ImportError
        assert event_loop_factory("auto") is None
        with pytest.raises(ValueError, match="not installed"):
            event_loop_factory("uvloop")


def test_unknown_loop_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="auto, uvloop or asyncio"):
        event_loop_factory("trio")
    with pytest.raises(SystemExit) as exited:  # the flag table's choices refuse it before main runs
        main(["--endpoints", "127.0.0.1:1", "--event-loop", "trio"])
    assert exited.value.code == 2
    assert "--event-loop: invalid choice: 'trio'" in capsys.readouterr().err


def test_grpc_aio_runs_on_the_chosen_loop() -> None:
    """A grpc.aio server and channel round trip on uvloop's loop (the picker's default)."""
    pytest.importorskip("uvloop")
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    async def round_trip() -> int:
        server = grpc.aio.server()
        servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
                return int(reply.status)
        finally:
            await server.stop(None)

    factory = event_loop_factory("auto")
    assert factory is not None
    with asyncio.Runner(loop_factory=factory) as runner:
        assert runner.run(round_trip()) == health_pb2.HealthCheckResponse.SERVING
