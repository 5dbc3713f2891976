"""Request, header and usage parsing."""

from __future__ import annotations

import orjson
import pytest

from smetric.epp.parse import RequestError, UsageReader, parse_body, parse_headers
from smetric.epp.parse.body import API_ANTHROPIC, API_CHAT, API_COMPLETIONS, API_RESPONSES, estimate_tokens


def body(doc: object) -> bytes:
    return orjson.dumps(doc)


def test_chat_turns_est_hit_and_prefix_stability() -> None:
    t0 = {"model": "m", "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "q0"}]}
    t1 = {
        "model": "m",
        "stream": True,
        "messages": [
            *t0["messages"],
            {"role": "assistant", "content": "a0"},
            {"role": "user", "content": "q1"},
        ],
    }
    p0, p1 = parse_body(body(t0), "/v1/chat/completions"), parse_body(body(t1), "/v1/chat/completions")
    assert (p0.api, p0.turn, p0.est_hit_tokens, p0.stream) == (API_CHAT, 0, 0, False)
    assert (p1.turn, p1.stream) == (1, True)
    assert p1.prompt_text.startswith(p0.prompt_text)  # turn k+1 extends turn k
    hit_text = p1.prompt_text[: p1.prompt_text.index("<|user|>q1")]
    assert p1.est_hit_tokens == estimate_tokens(len(hit_text))
    assert p1.prompt_tokens == estimate_tokens(len(p1.prompt_text))


def test_chat_parts_and_tool_calls_count_as_text() -> None:
    doc = {
        "model": "m",
        "tools": [{"type": "function", "function": {"name": "ls"}}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "list"}, {"type": "image_url", "image_url": {}}],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"function": {"name": "ls", "arguments": "{}"}}],
            },
            {"role": "tool", "content": "a.py b.py"},
        ],
    }
    p = parse_body(body(doc), "/v1/chat/completions")
    assert "list" in p.prompt_text and "ls{}" in p.prompt_text and "a.py b.py" in p.prompt_text
    assert p.prompt_text.startswith("<|tools|>")
    assert p.turn == 1


def test_anthropic_messages_system_and_tool_blocks() -> None:
    doc = {
        "model": "claude",
        "system": [{"type": "text", "text": "be brief"}],
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "name": "bash", "input": {"cmd": "ls"}}]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "content": [{"type": "text", "text": "out"}]}],
            },
        ],
    }
    p = parse_body(body(doc), "/v1/messages")
    assert p.api == API_ANTHROPIC and p.turn == 1
    assert "be brief" in p.prompt_text and 'bash{"cmd":"ls"}' in p.prompt_text and "out" in p.prompt_text


def test_responses_api_groups_one_model_turn() -> None:
    doc = {
        "model": "m",
        "instructions": "sys",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
            {"type": "function_call", "name": "edit", "arguments": '{"f":1}'},
            {"type": "function_call_output", "output": "ok"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
            {"role": "user", "content": "more"},
        ],
    }
    p = parse_body(body(doc), "/v1/responses")
    assert p.api == API_RESPONSES
    assert p.turn == 2  # [reasoning, function_call] is one turn, the assistant message another
    assert p.est_hit_tokens == estimate_tokens(p.prompt_text.index("<|user|>more"))
    assert (
        parse_body(body({"model": "m", "input": "hello"}), "/v1/responses").prompt_text == "<|user|>hello\n"
    )


def test_completions_prompt_forms() -> None:
    p = parse_body(body({"model": "m", "prompt": "abcdefgh"}), "/v1/completions")
    assert (p.api, p.turn, p.prompt_tokens, p.prompt_text) == (API_COMPLETIONS, 0, 2, "abcdefgh")
    ids = parse_body(body({"model": "m", "prompt": [1, 2, 3]}), "/v1/completions")
    assert ids.token_ids == (1, 2, 3) and ids.prompt_tokens == 3


def test_shape_detected_from_body_when_path_is_unknown() -> None:
    assert parse_body(body({"model": "m", "prompt": "x"}), "/generate").api == API_COMPLETIONS
    assert parse_body(body({"model": "m", "messages": [{"role": "user", "content": "x"}]})).api == API_CHAT


@pytest.mark.parametrize(
    ("raw", "path", "needle"),
    [
        (b"{", "/v1/chat/completions", "not valid JSON"),
        (b'"str"', "/v1/chat/completions", "JSON object"),
        (b'{"messages": []}', "/v1/chat/completions", "model"),
        (b'{"model": "", "prompt": "x"}', "/v1/completions", "model"),
        (b'{"model": "m", "messages": []}', "/v1/chat/completions", "messages"),
        (b'{"model": "m", "messages": [{"content": "x"}]}', "/v1/chat/completions", "role"),
        (b'{"model": "m", "messages": [{"role": "user", "content": 5}]}', "/v1/chat/completions", "content"),
        (b'{"model": "m", "prompt": {"a": 1}}', "/v1/completions", "prompt"),
        (b'{"model": "m", "prompt": "x", "stream": "yes"}', "/v1/completions", "stream"),
        (b'{"model": "m"}', "/v2/other", "unsupported request shape"),
    ],
)
def test_bad_bodies_raise_400_with_a_reason(raw: bytes, path: str, needle: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_body(raw, path)
    assert info.value.status == 400 and needle in info.value.message


def test_headers() -> None:
    h = parse_headers(
        {
            ":method": "POST",
            ":path": "/v1/chat/completions",
            "x-slo-ttft-ms": "1500",
            "x-slo-tpot-ms": "25",
            "x-session-token": "abc",
            "x-request-id": "rid",
        }
    )
    assert (h.ttft_slo_s, h.tpot_slo_s, h.session_token, h.request_id, h.sheddable) == (
        1.5,
        0.025,
        "abc",
        "rid",
        False,
    )
    assert parse_headers({}).request_id != parse_headers({}).request_id  # generated
    assert parse_headers({"x-sheddable": "True"}).sheddable
    assert parse_headers({"x-gateway-inference-objective": "sheddable"}).sheddable
    for bad in ("fast", "-5", "0", "inf", "nan"):
        with pytest.raises(RequestError):
            parse_headers({"x-slo-ttft-ms": bad})


def sse_lines(*events: object) -> bytes:
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def test_usage_from_openai_sse_split_across_chunks() -> None:
    stream = sse_lines(
        {"choices": [{"delta": {"content": "x"}}]},
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 10,
                "completion_tokens": 2,
                "prompt_tokens_details": {"cached_tokens": 4},
            },
        },
    )
    reader = UsageReader(sse=True)
    for i in range(0, len(stream), 7):
        reader.feed(stream[i : i + 7])
    u = reader.result()
    assert u is not None and (u.prompt_tokens, u.completion_tokens, u.cached_tokens) == (10, 2, 4)


def test_usage_from_anthropic_sse_merges_start_and_delta() -> None:
    stream = sse_lines(
        {
            "type": "message_start",
            "message": {"usage": {"input_tokens": 5, "cache_read_input_tokens": 95, "output_tokens": 1}},
        },
        {"type": "message_delta", "usage": {"output_tokens": 30}},
    )
    reader = UsageReader(sse=True)
    reader.feed(stream)
    u = reader.result()
    assert u is not None and (u.prompt_tokens, u.completion_tokens, u.cached_tokens) == (100, 30, 95)


def test_usage_from_json_and_responses_api() -> None:
    reader = UsageReader(sse=False)
    reader.feed(
        orjson.dumps(
            {"usage": {"input_tokens": 7, "output_tokens": 3, "input_tokens_details": {"cached_tokens": 2}}}
        )
    )
    u = reader.result()
    assert u is not None and (u.prompt_tokens, u.completion_tokens, u.cached_tokens) == (7, 3, 2)


def test_usage_absent_garbage_or_oversized_is_none() -> None:
    for sse, data in ((False, b"not json"), (True, b"data: {broken\n\n"), (False, b'{"id": 1}')):
        r = UsageReader(sse=sse)
        r.feed(data)
        assert r.result() is None
    r = UsageReader(sse=False, max_json_bytes=10)
    r.feed(b'{"usage": {"prompt_tokens": 1}}')
    assert r.result() is None
