"""Fixtures shared by the picker's servicer tests (helpers in tests.support.epp_harness)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

from smetric.epp.server.servicer import ExtProcServicer


@pytest.fixture
async def serve() -> AsyncIterator[object]:
    servers: list[grpc.aio.Server] = []
    channels: list[grpc.aio.Channel] = []

    async def start(servicer: ExtProcServicer) -> ep_grpc.ExternalProcessorStub:
        server = grpc.aio.server()
        ep_grpc.add_ExternalProcessorServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        channels.append(channel)
        return ep_grpc.ExternalProcessorStub(channel)

    yield start
    for c in channels:
        await c.close()
    for s in servers:
        await s.stop(None)
