"""The emulator's Anthropic Messages and OpenAI Responses routes, driven by the real ``anthropic``
and ``openai`` SDKs in process: shapes the SDKs accept, usage with cache fields, prefix hits shared
with chat completions, errors as the SDKs' typed exceptions, and the picker's rendering."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest

from smetric.emulator import sse
from smetric.emulator.cluster import RunningCluster, start_cluster
from smetric.emulator.config import EmulatorConfig
from smetric.emulator.ports import free_port_block
from smetric.emulator.responses_api import ResponsesRequest
from smetric.epp.parse.body import parse_body

MODEL = "emu-model"
SYSTEM = "You are a careful coding agent working in a large repository. " * 12
TOOLS: list[Any] = [{"name": "bash", "description": "run a command", "input_schema": {"type": "object"}}]


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


def _claude(c: RunningCluster) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=_base(c), api_key="x", max_retries=0)


def _gpt(c: RunningCluster) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=_base(c) + "/v1", api_key="x", max_retries=0)


def _turn1() -> list[dict[str, Any]]:
    return [{"role": "user", "content": "List the failing tests. " * 8}]


async def test_messages_stream_and_tool_turn_share_the_prefix(cluster: RunningCluster) -> None:
    claude = _claude(cluster)
    async with claude.messages.stream(
        model=MODEL,
        max_tokens=12,
        system=SYSTEM,
        tools=TOOLS,
        messages=_turn1(),  # type: ignore[arg-type]
    ) as stream:
        kinds = [event.type async for event in stream]
        first = await stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert {"content_block_start", "content_block_stop", "message_delta"} <= set(kinds)
    assert first.stop_reason == "max_tokens" and first.usage.output_tokens == 12
    text = first.content[0].text  # type: ignore[union-attr]
    assert text and first.usage.cache_read_input_tokens == 0
    # The agent's tool turn: the answer plus a tool_use block, then the tool's result.
    turn2 = [
        *_turn1(),
        {"role": "assistant", "content": [{"type": "text", "text": text},
                                          {"type": "tool_use", "id": "t1", "name": "bash", "input": {"cmd": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py b.py " * 20}]},
    ]  # fmt: skip
    second = await claude.messages.create(
        model=MODEL,
        max_tokens=4,
        system=SYSTEM,
        tools=TOOLS,
        messages=turn2,  # type: ignore[arg-type]
    )
    u = second.usage
    read, created = u.cache_read_input_tokens or 0, u.cache_creation_input_tokens or 0
    prompt = u.input_tokens + read + created
    assert read >= 16 * ((first.usage.input_tokens) // 16)  # the whole first prompt's blocks hit
    assert created == prompt - prompt % 16 - read and second.content[0].type == "text"
    await claude.close()


async def test_responses_stream_events_and_usage(cluster: RunningCluster) -> None:
    gpt = _gpt(cluster)
    stream = await gpt.responses.create(
        model=MODEL, instructions=SYSTEM, input="Run the tests.", max_output_tokens=10, stream=True
    )
    events = [e async for e in stream]
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed" and kinds.count("response.output_text.delta") == 10
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = events[-1].response  # type: ignore[union-attr]
    assert done.status == "incomplete" and done.usage is not None and done.usage.output_tokens == 10
    text = done.output_text
    follow = await gpt.responses.create(
        model=MODEL,
        instructions=SYSTEM,
        input=[
            {"role": "user", "content": "Run the tests."},
            {"role": "assistant", "content": text},
            {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": '{"cmd":"pytest"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "1 failed " * 30},
        ],
        max_output_tokens=3,
    )
    assert follow.usage is not None and follow.usage.input_tokens_details.cached_tokens >= 16
    assert follow.output_text and follow.incomplete_details is not None
    await gpt.close()


async def test_errors_reach_the_sdks_typed(cluster: RunningCluster) -> None:
    claude, gpt = _claude(cluster), _gpt(cluster)
    with pytest.raises(anthropic.BadRequestError) as bad:  # prompt + max_tokens over the context
        await claude.messages.create(model=MODEL, max_tokens=5000, messages=_turn1())  # type: ignore[arg-type]
    assert bad.value.body["type"] == "error" and "context length" in bad.value.body["error"]["message"]  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError):
        await claude.messages.create(model="other", max_tokens=5, messages=_turn1())  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError):
        await gpt.responses.create(model=MODEL, input=[], max_output_tokens=3)
    async with aiohttp.ClientSession() as http:
        for status, cls_a, cls_o in ((429, anthropic.RateLimitError, openai.RateLimitError),
                                     (500, anthropic.InternalServerError, openai.InternalServerError),
                                     (503, anthropic.InternalServerError, openai.InternalServerError)):  # fmt: skip
            fault = {"mode": "error", "status": status, "retry_after_s": 2}
            async with http.post(_base(cluster) + "/admin/fault", json=fault) as r:
                assert r.status == 200
            with pytest.raises(cls_a) as ea:
                await claude.messages.create(model=MODEL, max_tokens=5, messages=_turn1())  # type: ignore[arg-type]
            with pytest.raises(cls_o) as eo:
                await gpt.responses.create(model=MODEL, input="hi", max_output_tokens=3)
            for err in (ea.value, eo.value):
                assert err.status_code == status and err.response.headers["retry-after"] == "2"
        async with http.post(_base(cluster) + "/admin/fault", json={"mode": "ok"}) as r:
            assert r.status == 200
        async with http.post(_base(cluster) + "/admin/fault", json={"mode": "error", "status": 418}) as r:
            assert r.status == 400  # only statuses a client of vLLM meets
        async with http.post(_base(cluster) + "/v1/messages", data=b"{") as r:
            assert r.status == 400 and "error" in await r.json()
    await claude.close()
    await gpt.close()


async def test_raw_wire_frames_are_named_events(cluster: RunningCluster) -> None:
    body = {"model": MODEL, "max_tokens": 3, "stream": True, "messages": _turn1()}
    async with aiohttp.ClientSession() as http, http.post(_base(cluster) + "/v1/messages", json=body) as r:
        raw = await r.read()
    assert raw.startswith(b"event: message_start\ndata: ")
    events = [e for e in sse.parse_frames(raw) if e is not None]
    assert [e["type"] for e in events][-3:] == ["content_block_stop", "message_delta", "message_stop"]
    final = events[-2]["usage"]  # the whole prompt at the start, split by cache state at the end
    whole = final["input_tokens"] + final["cache_read_input_tokens"] + final["cache_creation_input_tokens"]
    assert events[0]["message"]["usage"] == {"input_tokens": whole, "output_tokens": 0}
    assert final["cache_creation_input_tokens"] == whole - whole % 16 and final["output_tokens"] == 3


def test_responses_rendering_is_the_pickers() -> None:
    body = {
        "model": MODEL,
        "instructions": SYSTEM,
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hello"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
            {"type": "function_call", "call_id": "c", "name": "bash", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "done"},
            {"role": "assistant", "content": "ok"},
        ],
    }
    ours = ResponsesRequest.model_validate(body).render_messages()
    assert ours == list(parse_body(orjson.dumps(body), "/v1/responses").messages)


async def test_deeply_nested_input_is_a_400_not_a_crash(cluster: RunningCluster) -> None:
    # 510 levels of function_call_output (1,020 JSON levels, under orjson's limit): without the depth
    # bound the text extraction recurses past Python's limit and the handler answers 500.
    depth = 510
    item = b'{"type":"function_call_output","call_id":"c","output":[' * depth + b'"x"' + b"]}" * depth
    body = b'{"model":"' + MODEL.encode() + b'","max_output_tokens":2,"input":[' + item + b"]}"
    async with aiohttp.ClientSession() as http, http.post(_base(cluster) + "/v1/responses", data=body) as r:
        assert r.status == 400 and "nested" in (await r.json())["error"]["message"]


async def test_count_tokens_is_the_prompt_a_generation_sees(cluster: RunningCluster) -> None:
    claude = _claude(cluster)
    counted = await claude.messages.count_tokens(model=MODEL, system=SYSTEM, messages=_turn1())  # type: ignore[arg-type]
    reply = await claude.messages.create(model=MODEL, max_tokens=2, system=SYSTEM, messages=_turn1())  # type: ignore[arg-type]
    u = reply.usage
    assert counted.input_tokens == u.input_tokens + (u.cache_read_input_tokens or 0) + (
        u.cache_creation_input_tokens or 0
    )
    with pytest.raises(anthropic.NotFoundError):
        await claude.messages.count_tokens(model="other", messages=_turn1())  # type: ignore[arg-type]
    await claude.close()


async def test_a_follow_up_needs_the_instance_that_stored_its_previous_response() -> None:
    """vLLM keeps stored responses in the serving engine's memory: the instance that answered
    finds previous_response_id, another answers 404 (as vLLM's _make_not_found_error)."""
    c = await start_cluster(
        EmulatorConfig(instances=2, port=free_port_block(2), model=MODEL, time_scale=0.01, max_model_len=4096)
    )
    try:
        first, other = (
            openai.AsyncOpenAI(base_url=f"http://{h}:{p}/v1", api_key="x", max_retries=0)
            for h, p in (r.addresses[0][:2] for r in c.runners)
        )
        stream = await first.responses.create(
            model=MODEL, input="Plan the fix.", stream=True, max_output_tokens=4
        )
        ids = [e.response.id async for e in stream if e.type == "response.completed"]
        (rid,) = ids
        follow = await first.responses.create(
            model=MODEL, input="Go on.", previous_response_id=rid, max_output_tokens=4
        )
        assert follow.previous_response_id == rid
        with pytest.raises(openai.NotFoundError, match="not found"):
            await other.responses.create(
                model=MODEL, input="Go on.", previous_response_id=rid, max_output_tokens=4
            )
        unstored = await first.responses.create(model=MODEL, input="x", store=False, max_output_tokens=4)
        with pytest.raises(openai.NotFoundError):
            await first.responses.create(
                model=MODEL, input="y", previous_response_id=unstored.id, max_output_tokens=4
            )
    finally:
        await c.stop()
