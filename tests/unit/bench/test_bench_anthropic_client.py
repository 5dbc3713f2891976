"""The bench's Anthropic Messages client (``smetric bench --api anthropic``) against the emulator in
process: the same conversation costs the same prompt as chat, TTFT comes from the first text delta,
usage and the server's timing are read from the Anthropic stream, errors are failed outcomes."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator

import aiohttp
import pytest

from smetric.bench.client import AnthropicClient, ChatClient, make_client
from smetric.bench.replay import SendSpec
from smetric.emulator.cluster import RunningCluster, start_cluster
from smetric.emulator.config import EmulatorConfig
from smetric.emulator.ports import free_port_block

MODEL = "emu-model"
SYSTEM = {"role": "system", "content": "You are a coding agent in a big repository. " * 20}


@pytest.fixture
async def cluster() -> AsyncIterator[RunningCluster]:
    c = await start_cluster(
        EmulatorConfig(port=free_port_block(1), model=MODEL, time_scale=0.01, max_model_len=4096)
    )
    yield c
    await c.stop()


def _base(c: RunningCluster) -> str:
    host, port = c.runners[0].addresses[0][:2]
    return f"http://{host}:{port}"


def _spec(rid: str, messages: list[dict[str, str]], max_tokens: int = 8) -> SendSpec:
    return SendSpec(rid, "s1", "f1", 0, tuple(messages), max_tokens, 0)


async def test_anthropic_client_measures_the_messages_stream(cluster: RunningCluster) -> None:
    turn1 = [SYSTEM, {"role": "user", "content": "Run the tests and fix the first failure. " * 4}]
    async with ChatClient(_base(cluster), MODEL) as chat:
        as_chat = await chat.send(_spec("c1", turn1))
    client = make_client("anthropic", _base(cluster), MODEL)
    assert isinstance(client, AnthropicClient)
    assert (
        "system" in client.body(_spec("x", turn1)) and client.body(_spec("x", turn1))["messages"] == turn1[1:]
    )
    async with client:
        first = await client.send(_spec("a1", turn1))
        assert first.ok and first.output_tokens == 8 and first.text
        assert first.prompt_tokens == as_chat.prompt_tokens  # the same prompt as the chat request's
        assert first.cached_tokens >= as_chat.prompt_tokens - as_chat.prompt_tokens % 16 - 16
        assert 0 < first.ttft_s <= first.e2e_s and not math.isnan(first.server_ttft_s)
        assert not math.isnan(first.engine_ttft_model_s)
        turn2 = [*turn1, {"role": "assistant", "content": first.text}, {"role": "user", "content": "Next."}]
        second = await client.send(_spec("a2", turn2))
        assert second.ok and second.cached_tokens > first.prompt_tokens - 16
        bad = await client.send(_spec("a3", turn1, max_tokens=5000))  # over the context
        assert not bad.ok and bad.status == 400 and "context length" in bad.error
    assert client.in_flight == {}


async def test_a_stream_cut_by_the_engine_is_a_failed_outcome(cluster: RunningCluster) -> None:
    turn = [SYSTEM, {"role": "user", "content": "Write the whole module."}]
    async with aiohttp.ClientSession() as http, AnthropicClient(_base(cluster), MODEL) as client:
        async with http.post(_base(cluster) + "/admin/fault", json={"mode": "slow", "slowdown": 50}) as r:
            assert r.status == 200
        sending = asyncio.create_task(client.send(_spec("cut", turn, max_tokens=2000)))
        while "streaming" not in client.in_flight.get("cut", ""):  # the first text delta arrived
            await asyncio.sleep(0.02)
        async with http.post(_base(cluster) + "/admin/fault", json={"mode": "dead"}) as r:
            assert r.status == 200
        out = await sending
    assert not out.ok and out.status == 200 and out.error.startswith("stream error: request aborted")
