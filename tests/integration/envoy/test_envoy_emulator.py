"""End to end with every real part: `smetric emulate` (3 emulated vLLM instances, KV events over
ZMQ) + the real `smetric-epp` process (standalone discovery, /metrics scraping, precise index fed
by KV events) + a real Envoy. A multi-turn agent session must keep hitting one instance's cache."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from smetric.emulator.ports import free_port_block
from smetric.epp.envoy import EnvoyOptions, EnvoyProcess, bootstrap, free_port
from smetric.epp.obs.health import wait_serving
from tests.support.childproc import spawn, stop

pytestmark = pytest.mark.integration

N = 3
MODEL = "emu/test-model"


@dataclass
class Cluster:
    url: str
    emu_port: int
    metrics_url: str
    session: aiohttp.ClientSession


@pytest.fixture(params=["inline", "observer"])
async def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    response_path = request.param
    port, kv_port = free_port_block(N), free_port_block(N)
    emu = await spawn(
        "-m", "smetric.core.cli", "emulate", "--instances", str(N), "--port", str(port),
        "--kv-events-port", str(kv_port), "--time-scale", "0.05", "--model", MODEL, "--hash-seed", "0",
    )  # fmt: skip
    assert emu.stdout is not None
    line = await asyncio.wait_for(emu.stdout.readline(), 60)
    assert b"ready" in line, line
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text(
        yaml.safe_dump(
            [
                {"address": f"127.0.0.1:{port + i}", "kv_events": f"tcp://127.0.0.1:{kv_port + i}"}
                for i in range(N)
            ]
        )
    )
    config = tmp_path / "picker.yaml"  # the session tests need smetric (set explicitly: no global tier here)
    config.write_text(yaml.safe_dump({"policy": {"name": "smetric"}}))
    grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
    epp = await spawn(
        "-m", "smetric.epp.main", "--endpoints", f"@{endpoints}", "--prefix-index", "precise",
        "--config", str(config),
        "--hash-seed", "0", "--grpc-port", str(grpc_port), "--grpc-health-port", str(health_port),
        "--metrics-port", str(metrics_port), "--log-level", "warning", "--response-path", response_path,
        "--secure-serving=false",
    )  # fmt: skip
    opts = EnvoyOptions(
        listen_port=free_port(),
        admin_port=free_port(),
        picker_port=grpc_port,
        response_path=response_path,  # type: ignore[arg-type]
    )
    envoy = EnvoyProcess(bootstrap(opts))
    try:
        await wait_serving(f"127.0.0.1:{health_port}", 30.0)
        await envoy.start()
        url = f"http://127.0.0.1:{envoy.config['static_resources']['listeners'][0]['address']['socket_address']['port_value']}"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            await asyncio.sleep(0.5)  # first scrapes + KV subscriptions
            yield Cluster(url, port, f"http://127.0.0.1:{metrics_port}/metrics", session)
    finally:
        await envoy.stop()
        await stop(epp)
        await stop(emu)
    assert epp.returncode == 0  # SIGTERM: drained and exited cleanly


async def _chat_stream(c: Cluster, messages: list[dict[str, str]]) -> tuple[int, str]:
    body = {"model": MODEL, "messages": messages, "stream": True, "max_tokens": 16}
    text: list[str] = []
    async with c.session.post(c.url + "/v1/chat/completions", data=orjson.dumps(body)) as r:
        async for raw in r.content:
            line = raw.strip()
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                for choice in orjson.loads(line[6:]).get("choices", []):
                    text.append(choice.get("delta", {}).get("content") or "")
        return r.status, "".join(text)


async def _samples(
    session: aiohttp.ClientSession, url: str, name: str
) -> dict[tuple[tuple[str, str], ...], float]:
    async with session.get(url) as r:
        text = await r.text()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


async def _prefix_hits(c: Cluster) -> list[float]:
    hits = []
    for i in range(N):
        found = await _samples(
            c.session, f"http://127.0.0.1:{c.emu_port + i}/metrics", "vllm:prefix_cache_hits_total"
        )
        hits.append(sum(found.values()))
    return hits


async def test_agent_session_sticks_to_its_cache_through_envoy(cluster: Cluster) -> None:
    messages = [{"role": "system", "content": "You are a coding agent. Use the tools. " * 40}]
    for turn in range(4):
        messages.append({"role": "user", "content": f"tool output for step {turn}: " + "ok " * 60})
        status, answer = await _chat_stream(cluster, messages)
        assert status == 200 and answer
        messages.append({"role": "assistant", "content": answer})
        await asyncio.sleep(0.3)  # the engine's BlockStored events reach the picker
    decisions = await _samples(cluster.session, cluster.metrics_url, "smetric_epp_decisions_total")
    by_reason = {dict(k)["reason"]: v for k, v in decisions.items()}
    assert by_reason.get("balance") == 1 and by_reason.get("stick") == 3
    hits = await _prefix_hits(cluster)
    assert sorted(hits)[-1] > 0 and sorted(hits)[-2] == 0  # all reuse happened on one instance
    # every streamed answer gave the picker its first-token time (inline or via the observer)
    ttft = await _samples(cluster.session, cluster.metrics_url, "smetric_epp_ttft_seconds_count")
    assert sum(ttft.values()) == 4
    # llm-d-router's series from the same real streams (docs/picker.md, llm_d_epp_*)
    url, session = cluster.metrics_url, cluster.session
    requests = await _samples(session, url, "llm_d_epp_request_total")
    assert sum(requests.values()) == 4 and {dict(k)["fairness_id"] for k in requests} == {"default-flow"}
    streamed = await _samples(session, url, "llm_d_epp_request_ttft_seconds_count")
    assert {dict(k)["streaming"]: v for k, v in streamed.items()} == {"true": 4.0}
    # one observation per chunk after a stream's first; a loaded box can deliver an answer in one chunk
    assert sum((await _samples(session, url, "llm_d_epp_request_streaming_itl_seconds_count")).values()) >= 1
    assert sum((await _samples(session, url, "llm_d_epp_request_running")).values()) == 0
    assert sum((await _samples(session, url, "llm_d_epp_extproc_streams_total")).values()) >= 4
