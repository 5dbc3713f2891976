"""The agents' own APIs end to end: the real ``anthropic`` and ``openai`` SDKs through a real Envoy,
the real `smetric-epp` process (precise index fed by KV events) and `smetric emulate` (3 instances).

* Multi-turn agent sessions with tool calls (Anthropic ``tool_use``/``tool_result``, Responses
  ``function_call``/``function_call_output``) stick to one engine and reuse its cache.
* The picker records TTFT and the token usage from the Anthropic and Responses streams (its
  Prometheus series agree with what the SDKs were told).
* Errors reach the SDKs as their typed exceptions: 400, 429 and 503 with ``retry-after``, 500.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from openai.types.responses import ResponseCompletedEvent

from tests.support.agent_stack import Stack, emulated_engines, picker_stack, samples, total, usage_tokens

pytestmark = pytest.mark.integration

N = 3
MODEL = "emu/agent-model"
SYSTEM = "You are a coding agent. Use the tools to read and edit the repository. " * 30
TOOLS: list[Any] = [
    {"name": "bash", "description": "run a shell command", "input_schema": {"type": "object"}}
]


class Cluster:
    def __init__(self, stack: Stack, emu_port: int) -> None:
        self.stack = stack
        self.emu_port = emu_port

    def claude(self) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(base_url=self.stack.url, api_key="x", max_retries=0, timeout=60)

    def gpt(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.stack.url + "/v1", api_key="x", max_retries=0, timeout=60)

    async def prefix_hits(self) -> list[float]:
        return [
            await total(f"http://127.0.0.1:{self.emu_port + i}/metrics", "vllm:prefix_cache_hits_total")
            for i in range(N)
        ]

    async def fault(self, spec: dict[str, Any]) -> None:
        async with aiohttp.ClientSession() as http:
            for i in range(N):
                async with http.post(f"http://127.0.0.1:{self.emu_port + i}/admin/fault", json=spec) as r:
                    assert r.status == 200, await r.text()


@pytest.fixture
async def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    response_path = getattr(request, "param", "inline")  # the session tests run both paths
    async with (
        emulated_engines(N, MODEL, 0.05) as (_, port, engines),
        picker_stack(tmp_path, engines, response_path=response_path) as stack,
    ):
        await asyncio.sleep(0.5)  # first scrapes + KV subscriptions
        yield Cluster(stack, port)


async def _decisions(c: Cluster) -> dict[str, float]:
    found = await samples(c.stack.metrics_url, "smetric_epp_decisions_total")
    return {dict(k)["reason"]: v for k, v in found.items()}


@pytest.mark.parametrize("cluster", ["inline", "observer"], indirect=True)
async def test_claude_session_with_tool_calls_sticks_and_is_measured(cluster: Cluster) -> None:
    claude = cluster.claude()
    messages: list[Any] = []
    told = {"prompt": 0, "completion": 0, "cached": 0}
    for turn in range(4):
        if turn == 0:
            messages.append({"role": "user", "content": "Find the failing test. " * 10})
        else:
            result = f"output of step {turn}: " + "ok " * 60
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"t{turn}", "content": result}]})  # fmt: skip
        async with claude.messages.stream(
            model=MODEL, max_tokens=16, system=SYSTEM, tools=TOOLS, messages=messages
        ) as stream:
            kinds = [event.type async for event in stream]
            reply = await stream.get_final_message()
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
        u = reply.usage
        read, created = u.cache_read_input_tokens or 0, u.cache_creation_input_tokens or 0
        told["prompt"] += u.input_tokens + read + created
        told["completion"] += u.output_tokens
        told["cached"] += read
        if turn:
            assert read > 0  # the session's earlier turns were cached where it was routed
        text = reply.content[0].text  # type: ignore[union-attr]
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": text},
            {"type": "tool_use", "id": f"t{turn + 1}", "name": "bash", "input": {"cmd": f"step {turn}"}}]})  # fmt: skip
        await asyncio.sleep(0.3)  # the engine's BlockStored events reach the picker
    await claude.close()
    by_reason = await _decisions(cluster)
    assert by_reason.get("balance") == 1 and by_reason.get("stick") == 3
    hits = sorted(await cluster.prefix_hits())
    assert hits[-1] > 0 and hits[-2] == 0  # all reuse happened on one instance
    assert await total(cluster.stack.metrics_url, "smetric_epp_ttft_seconds_count") == 4
    assert await total(cluster.stack.metrics_url, "smetric_epp_tpot_seconds_count") == 4
    assert await usage_tokens(cluster.stack) == {k: float(v) for k, v in told.items()}


@pytest.mark.parametrize("cluster", ["inline", "observer"], indirect=True)
async def test_responses_session_with_function_calls_sticks_and_is_measured(cluster: Cluster) -> None:
    gpt = cluster.gpt()
    items: list[Any] = [{"role": "user", "content": "Find the failing test. " * 10}]
    told = {"prompt": 0, "completion": 0, "cached": 0}
    for turn in range(4):
        stream = await gpt.responses.create(
            model=MODEL,
            instructions=SYSTEM,
            input=items,
            max_output_tokens=16,
            stream=True,
        )
        done = None
        async for event in stream:
            if isinstance(event, ResponseCompletedEvent):
                done = event.response
        assert done is not None and done.usage is not None
        u = done.usage
        told["prompt"] += u.input_tokens
        told["completion"] += u.output_tokens
        told["cached"] += u.input_tokens_details.cached_tokens
        if turn:
            assert u.input_tokens_details.cached_tokens > 0
        items += [
            {"role": "assistant", "content": done.output_text},
            {
                "type": "function_call",
                "call_id": f"c{turn}",
                "name": "bash",
                "arguments": f'{{"step": {turn}}}',
            },
            {"type": "function_call_output", "call_id": f"c{turn}", "output": "ok " * 60},
        ]
        await asyncio.sleep(0.3)
    await gpt.close()
    by_reason = await _decisions(cluster)
    assert by_reason.get("balance") == 1 and by_reason.get("stick") == 3
    hits = sorted(await cluster.prefix_hits())
    assert hits[-1] > 0 and hits[-2] == 0
    assert await total(cluster.stack.metrics_url, "smetric_epp_ttft_seconds_count") == 4
    assert await total(cluster.stack.metrics_url, "smetric_epp_tpot_seconds_count") == 4
    assert await usage_tokens(cluster.stack) == {k: float(v) for k, v in told.items() if v}


async def test_errors_reach_the_sdks_as_typed_exceptions(cluster: Cluster) -> None:
    claude, gpt = cluster.claude(), cluster.gpt()
    turn = [{"role": "user", "content": "hello"}]
    with pytest.raises(anthropic.BadRequestError) as bad:  # over the context: the engine's 400
        await claude.messages.create(model=MODEL, max_tokens=9000, messages=turn)  # type: ignore[arg-type]
    assert "maximum context length" in str(bad.value)
    with pytest.raises(openai.BadRequestError):
        await gpt.responses.create(model=MODEL, input="hello", max_output_tokens=9000)
    with pytest.raises(anthropic.BadRequestError):  # the picker's own 400: a body it cannot parse
        await claude.messages.create(model=MODEL, max_tokens=5, messages=[])
    refused = await samples(cluster.stack.metrics_url, "smetric_epp_immediate_responses_total")
    assert refused.get((("code", "400"),)) == 1  # answered by the picker, not the engine
    for status, a_cls, o_cls in ((429, anthropic.RateLimitError, openai.RateLimitError),
                                 (503, anthropic.InternalServerError, openai.InternalServerError),
                                 (500, anthropic.InternalServerError, openai.InternalServerError)):  # fmt: skip
        await cluster.fault({"mode": "error", "status": status, "retry_after_s": 0 if status == 500 else 3})
        with pytest.raises(a_cls) as ea:
            await claude.messages.create(model=MODEL, max_tokens=5, messages=turn)  # type: ignore[arg-type]
        with pytest.raises(o_cls) as eo:
            await gpt.responses.create(model=MODEL, input="hello", max_output_tokens=5)
        for err in (ea.value, eo.value):
            assert err.status_code == status
            assert err.response.headers.get("retry-after") == (None if status == 500 else "3")
    await cluster.fault({"mode": "ok"})
    reply = await claude.messages.create(model=MODEL, max_tokens=3, messages=turn)  # type: ignore[arg-type]
    assert reply.usage.output_tokens == 3
    await claude.close()
    await gpt.close()


async def test_token_counts_pass_the_gateway_and_charge_no_prefill(cluster: Cluster) -> None:
    """Claude Code counts a turn's tokens before sending it: the gateway forwards the call, the
    engine answers with what a generation of the same body would prefill, and the picker routes it
    by load (a ``balance`` decision, no TTFT sample: nothing was generated)."""
    claude = cluster.claude()
    messages: list[Any] = [{"role": "user", "content": "Find the failing test. " * 10}]
    counted = await claude.messages.count_tokens(model=MODEL, system=SYSTEM, messages=messages)
    assert counted.input_tokens > 0
    async with claude.messages.stream(model=MODEL, max_tokens=4, system=SYSTEM, messages=messages) as stream:
        reply = await stream.get_final_message()
    await claude.close()
    u = reply.usage
    assert u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0) == (
        counted.input_tokens
    )
    assert (await _decisions(cluster)).get("balance") == 2
    assert await total(cluster.stack.metrics_url, "smetric_epp_ttft_seconds_count") == 1
