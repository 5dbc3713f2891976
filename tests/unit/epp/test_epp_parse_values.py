"""Request headers and bodies as the picker reads them, asserted field by field (docs/mutation.md).

The expected prompt texts are written out: the rendering is what a prefix index hashes, so a
change to a role marker, a separator or the order of segments must fail here.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import orjson
import pytest

from smetric.epp.parse.body import (
    MAX_CONTENT_DEPTH,
    ParsedBody,
    content_text,
    detect_api,
    estimate_tokens,
    parse_body,
)
from smetric.epp.parse.errors import RequestError
from smetric.epp.parse.headers import RequestHeaders, parse_headers


def ceil4(n: int) -> int:
    return -(-n // 4)


def body(**doc: Any) -> bytes:
    return json.dumps({"model": "m", **doc}).encode()


def refused(fragment: str, raw: bytes, path: str = "") -> None:
    with pytest.raises(RequestError) as err:
        parse_body(raw, path)
    assert err.value.status == 400
    assert err.value.message.startswith(fragment), err.value.message


# ---- headers ---------------------------------------------------------------------------------


def test_headers_all_fields() -> None:
    h = parse_headers(
        {
            ":method": "PUT",
            ":path": "/v1/chat/completions",
            "x-request-id": "rid-1",
            "x-slo-ttft-ms": "250",
            "x-slo-tpot-ms": " 20 ",
            "x-session-token": "tok",
            "x-gateway-inference-objective": "premium",
            "x-gateway-inference-fairness-id": "tenant-a",
            "x-gateway-model-name-rewrite": "m2",
            "content-type": "application/json",
        }
    )
    assert h == RequestHeaders(
        method="PUT",
        path="/v1/chat/completions",
        request_id="rid-1",
        ttft_slo_s=0.25,
        tpot_slo_s=0.02,
        session_token="tok",
        sheddable=False,
        objective="premium",
        fairness_id="tenant-a",
        model_rewrite="m2",
        content_type="application/json",
    )


def test_headers_defaults() -> None:
    h = parse_headers({})
    assert (h.method, h.path, h.ttft_slo_s, h.tpot_slo_s, h.session_token, h.sheddable) == (
        "POST",
        "",
        None,
        None,
        None,
        False,
    )
    assert (h.objective, h.fairness_id, h.model_rewrite, h.content_type) == ("", "", "", "")
    assert len(h.request_id) == 32 and int(h.request_id, 16) >= 0  # a fresh uuid4 hex
    assert parse_headers({}).request_id != h.request_id
    assert len(parse_headers({"x-request-id": ""}).request_id) == 32
    assert parse_headers({"x-session-token": ""}).session_token is None
    d = RequestHeaders("GET", "/", "r")
    assert (d.ttft_slo_s, d.tpot_slo_s, d.session_token, d.sheddable) == (None, None, None, False)
    assert (d.objective, d.fairness_id, d.model_rewrite, d.content_type) == ("", "", "", "")
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.path = "/x"  # type: ignore[misc]
    assert not hasattr(d, "__dict__")


@pytest.mark.parametrize(
    "headers, sheddable",
    [
        ({"x-sheddable": "true"}, True),
        ({"x-sheddable": " TRUE "}, True),
        ({"x-sheddable": "1"}, True),
        ({"x-sheddable": "Yes"}, True),
        ({"x-sheddable": "false"}, False),
        ({"x-sheddable": "0"}, False),
        ({"x-sheddable": ""}, False),
        ({"x-gateway-inference-objective": " Sheddable "}, True),
        ({"x-gateway-inference-objective": "critical"}, False),
        ({"x-sheddable": "no", "x-gateway-inference-objective": "sheddable"}, True),
    ],
)
def test_sheddable(headers: dict[str, str], sheddable: bool) -> None:
    assert parse_headers(headers).sheddable is sheddable


@pytest.mark.parametrize("value", ["", "   "])
def test_blank_slo_header_is_unset(value: str) -> None:
    h = parse_headers({"x-slo-ttft-ms": value, "x-slo-tpot-ms": value})
    assert (h.ttft_slo_s, h.tpot_slo_s) == (None, None)


@pytest.mark.parametrize("name", ["x-slo-ttft-ms", "x-slo-tpot-ms"])
def test_slo_header_errors_name_the_header(name: str) -> None:
    with pytest.raises(RequestError) as err:
        parse_headers({name: "fast"})
    assert (err.value.status, err.value.message) == (
        400,
        f"header {name} must be a number of milliseconds, got 'fast'",
    )
    for bad in ("0", "-5", "inf", "nan", "-inf"):
        with pytest.raises(RequestError) as err:
            parse_headers({name: bad})
        assert (err.value.status, err.value.message) == (
            400,
            f"header {name} must be a positive finite number of milliseconds, got {bad!r}",
        )
    assert parse_headers({name: "0.5"}).ttft_slo_s in (None, 0.0005)


# ---- bodies ------------------------------------------------------------------------------------


def test_estimate_tokens_rounds_up() -> None:
    assert [estimate_tokens(n) for n in (0, 1, 3, 4, 5, 8, 9)] == [0, 1, 1, 1, 2, 2, 3]


def test_chat_rendering_turns_and_hit() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": 2}}}]
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": [{"type": "text", "text": "U1"}, {"type": "image_url"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"x":1}'}}, "junk"],
        },
        {"role": "tool", "content": "R"},
        {"role": "assistant", "content": "A2"},
        {"role": "user", "content": "U2"},
    ]
    p = parse_body(body(messages=messages, tools=tools, stream=True), "/v1/chat/completions")
    tools_json = orjson.dumps(tools, option=orjson.OPT_SORT_KEYS).decode()
    head = f'<|tools|>{tools_json}\n<|system|>S\n<|user|>U1\n<|assistant|>f{{"x":1}}\n<|tool|>R\n<|assistant|>A2\n'
    text = head + "<|user|>U2\n"
    assert p == ParsedBody(
        api="chat",
        model="m",
        prompt_text=text,
        prompt_tokens=ceil4(len(text)),
        turn=2,
        est_hit_tokens=ceil4(len(head)),
        stream=True,
        messages=tuple(messages),
    )
    assert '"a":2,"b":1' in tools_json  # keys sorted: a stable prefix whatever the client's order


def test_first_turn_has_no_hit_and_empty_tools_add_nothing() -> None:
    p = parse_body(body(messages=[{"role": "user", "content": "hi"}], tools=[]))
    assert (p.api, p.prompt_text, p.prompt_tokens, p.turn, p.est_hit_tokens, p.stream) == (
        "chat",
        "<|user|>hi\n",
        3,
        0,
        0,
        False,
    )
    assert (p.token_ids, p.messages) == ((), ({"role": "user", "content": "hi"},))


def test_anthropic_messages_system_tool_use_and_tool_result() -> None:
    messages = [
        {"role": "user", "content": "Q"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "T"},
                {"type": "tool_use", "name": "ls", "input": {"p": "/"}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "content": [{"type": "text", "text": "out"}]}]},
    ]
    system = [{"type": "text", "text": "SYS"}]
    p = parse_body(body(system=system, messages=messages), "/v1/messages")
    head = '<|system|>SYS\n<|user|>Q\n<|assistant|>Tls{"p":"/"}\n'
    assert p.api == "anthropic"
    assert p.prompt_text == head + "<|user|>out\n"
    assert (p.turn, p.est_hit_tokens) == (1, ceil4(len(head)))
    assert p.messages == ({"role": "system", "content": system}, *messages)
    no_input = parse_body(body(messages=[{"role": "assistant", "content": [{"type": "tool_use"}]}]))
    assert no_input.prompt_text == "<|assistant|>{}\n"


def test_responses_items_and_assistant_runs() -> None:
    items = [
        {"role": "user", "content": "Q"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "function_call", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "output": "R"},
        {"type": "custom_tool_call", "name": "g", "input": "x"},
        {"type": "custom_tool_call_output", "output": [{"type": "input_text", "text": "R2"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A"}]},
        {"type": "message", "role": "", "content": "U2"},
        {"role": "developer", "content": "D"},
    ]
    p = parse_body(body(instructions="I", input=items, tools=[{"name": "f"}]), "/v1/responses")
    head = (
        '<|tools|>[{"name":"f"}]\n<|system|>I\n<|user|>Q\n<|assistant|>think\n<|assistant|>f{}\n'
        "<|tool|>R\n<|assistant|>gx\n<|tool|>R2\n<|assistant|>A\n"
    )
    assert p.api == "responses"
    assert p.prompt_text == head + "<|user|>U2\n<|developer|>D\n"
    # reasoning + function_call are one model turn; the custom call and the message are two more
    assert (p.turn, p.est_hit_tokens) == (3, ceil4(len(head)))
    assert p.messages[:3] == (
        {"role": "system", "content": "I"},
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "think"},
    )
    assert p.messages[-2:] == ({"role": "user", "content": "U2"}, {"role": "developer", "content": "D"})
    assert len(p.messages) == 10


def test_assistant_turns_group_only_in_responses() -> None:
    chat = body(
        messages=[
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a"},
            {"role": "assistant", "content": "b"},
        ]
    )
    assert parse_body(chat, "/v1/chat/completions").turn == 2  # two assistant messages, two turns
    first = body(
        input=[{"type": "function_call", "name": "f", "arguments": "{}"}, {"role": "user", "content": "q"}]
    )
    assert parse_body(first, "/v1/responses").turn == 1  # an opening assistant item is a turn


def test_responses_items_with_a_role_keep_their_type() -> None:
    items = [
        {"type": "function_call", "role": "assistant", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "role": "tool", "output": "R"},
    ]
    p = parse_body(body(input=items), "/v1/responses")
    assert p.prompt_text == "<|assistant|>f{}\n<|tool|>R\n"


def test_responses_items_without_a_role() -> None:
    items = [{"content": "a"}, {"type": "message", "content": "b"}, {"type": "item_reference", "id": "r"}]
    p = parse_body(body(input=items), "/v1/responses")
    # untyped and typed messages are the user's; an unknown item without a role has no text
    assert p.prompt_text == "<|user|>a\n<|user|>b\n<|tool|>\n"


def test_hit_counts_every_character_up_to_the_last_answer() -> None:
    # 9 + 15 = 24 characters up to the answer's end: exactly 6 estimated tokens
    p = parse_body(
        body(
            messages=[
                {"role": "user", "content": ""},
                {"role": "assistant", "content": "a"},
                {"role": "user", "content": "x"},
            ]
        )
    )
    assert p.prompt_text == "<|user|>\n<|assistant|>a\n<|user|>x\n"
    assert (p.turn, p.est_hit_tokens) == (1, 6)


def test_responses_string_input_and_no_instructions() -> None:
    p = parse_body(body(input="hello", instructions=""), "/v1/responses")
    assert (p.prompt_text, p.turn, p.est_hit_tokens, p.messages) == (
        "<|user|>hello\n",
        0,
        0,
        ({"role": "user", "content": "hello"},),
    )


def test_function_call_part_falls_back_to_input() -> None:
    p = parse_body(body(input=[{"type": "function_call", "name": "f", "input": "I"}]), "/v1/responses")
    assert p.prompt_text == "<|assistant|>fI\n"
    q = parse_body(body(input=[{"type": "function_call"}]), "/v1/responses")
    assert q.prompt_text == "<|assistant|>\n"


def test_completions_prompts() -> None:
    s = parse_body(body(prompt="abcde"), "/v1/completions")
    assert s == ParsedBody("completions", "m", "abcde", 2, 0, 0, False)
    lst = parse_body(body(prompt=["ab", "cd"]), "/v1/completions")
    assert (lst.prompt_text, lst.prompt_tokens) == ("ab\ncd", 2)
    ids = parse_body(body(prompt=[5, 6, 7]), "/v1/completions")
    assert (ids.prompt_text, ids.prompt_tokens, ids.token_ids) == ("", 3, (5, 6, 7))
    for bad in ([], [True, 1], ["a", 1], 5, None):
        refused("'prompt' must be a string, a list of strings or a list of token ids", body(prompt=bad))


@pytest.mark.parametrize(
    "path, doc, api",
    [
        ("/v1/chat/completions?x=1", {}, "chat"),
        ("/v1/chat/completions/", {}, "chat"),
        ("/v1/completions", {}, "completions"),
        ("/v1/completions/?a=b", {}, "completions"),
        ("/v1/responses", {}, "responses"),
        ("/v1/messages", {}, "anthropic"),
        ("", {"messages": [], "system": "s"}, "anthropic"),
        ("", {"messages": []}, "chat"),
        ("", {"prompt": "p"}, "completions"),
        ("", {"input": "i"}, "responses"),
        ("/other", {"prompt": "p", "input": "i"}, "completions"),
        ("/v1/completionsX", {"input": "i"}, "responses"),  # only slashes are trimmed
        ("/other", {"messages": [], "prompt": "p"}, "chat"),
    ],
)
def test_detect_api(path: str, doc: dict[str, Any], api: str) -> None:
    assert detect_api(path, doc) == api


def test_detect_api_refuses_an_unknown_shape() -> None:
    with pytest.raises(RequestError) as err:
        detect_api("/x", {"foo": 1})
    assert (err.value.status, err.value.message) == (
        400,
        "unsupported request shape for path '/x': no messages, prompt or input",
    )


@pytest.mark.parametrize(
    "raw, fragment",
    [
        (b"{", "request body is not valid JSON: "),
        (b"[]", "request body must be a JSON object"),
        (b'{"messages": []}', "request body has no 'model' (a non-empty string)"),
        (b'{"model": "", "prompt": "p"}', "request body has no 'model'"),
        (b'{"model": 5, "prompt": "p"}', "request body has no 'model'"),
        (b'{"model": "m", "prompt": "p", "stream": 1}', "'stream' must be a boolean"),
        (b'{"model": "m", "messages": []}', "'messages' must be a non-empty list"),
        (b'{"model": "m", "messages": {"role": "user"}}', "'messages' must be a non-empty list"),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": "x"}, 3]}',
            "messages[1] must be an object",
        ),
        (b'{"model": "m", "messages": [{"role": ""}]}', "messages[0].role must be a non-empty string"),
        (b'{"model": "m", "messages": [{"role": 7}]}', "messages[0].role must be a non-empty string"),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": 5}]}',
            "messages[0]: content must be a string",
        ),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": [5]}]}',
            "messages[0]: a content part must be",
        ),
        (
            b'{"model": "m", "system": 5, "messages": [{"role": "user", "content": "x"}]}',
            "system: content must be",
        ),
        (b'{"model": "m", "input": []}', "'input' must be a string or a non-empty list"),
        (b'{"model": "m", "input": 5}', "'input' must be a string or a non-empty list"),
        (b'{"model": "m", "input": ["x"]}', "input[0] must be an object"),
        (b'{"model": "m", "input": [{"role": "user", "content": 1.5}]}', "input[0]: content must be"),
    ],
)
def test_bad_bodies_get_a_400_that_names_the_problem(raw: bytes, fragment: str) -> None:
    refused(fragment, raw)


def test_content_text_shapes() -> None:
    assert content_text(None, "w") == ""
    assert content_text("s", "w") == "s"
    assert content_text({"type": "text", "text": "one"}, "w") == "one"
    assert content_text([{"type": "image"}, "a", {"text": "b"}], "w") == "ab"
    assert content_text([{"type": "tool_result", "content": "r"}], "w") == "r"
    assert content_text([{"type": "reasoning", "summary": "s"}], "w") == "s"
    assert content_text([{"type": "function_call_output", "output": "o"}], "w") == "o"
    assert content_text([{"type": "tool_use", "name": "n"}], "w") == "n{}"


def _nested(levels: int) -> object:
    """``levels`` tool_result parts inside each other, each in its own content list."""
    content: object = "x"
    for _ in range(levels):
        content = [{"type": "tool_result", "content": content}]
    return content


def test_content_depth_limit() -> None:
    assert MAX_CONTENT_DEPTH == 64
    # a list and its part are a level each: the 32nd part sits at depth 63
    assert content_text(_nested(32), "w") == "x"
    assert content_text(_nested(32), "w", 1) == "x"  # its last part exactly at the limit
    with pytest.raises(RequestError) as err:
        content_text(_nested(32), "w", 2)
    assert (err.value.status, err.value.message) == (400, "w: content is nested more than 64 levels deep")
    with pytest.raises(RequestError):
        content_text(_nested(33), "w")


def test_depth_limit_through_a_responses_tool_output() -> None:
    # the item itself is level 0: its 32nd nested part sits exactly at the limit
    ok = body(input=[{"type": "function_call_output", "output": _nested(32)}])
    assert parse_body(ok, "/v1/responses").prompt_text == "<|tool|>x\n"
    refused(
        "input[0]: content is nested more than 64 levels deep",
        body(input=[{"type": "function_call_output", "output": _nested(33)}]),
        "/v1/responses",
    )


NESTING = [("reasoning", "summary"), ("function_call_output", "output"), ("tool_result", "content")]


def _chain(levels: int, kind: str, key: str, in_lists: bool = True) -> object:
    content: object = "x"
    for _ in range(levels):
        part = {"type": kind, key: content}
        content = [part] if in_lists else part
    return content


@pytest.mark.parametrize("kind, key", NESTING)
@pytest.mark.parametrize("in_lists", [True, False])
def test_every_nesting_part_counts_towards_the_depth_limit(kind: str, key: str, in_lists: bool) -> None:
    assert content_text(_chain(32, kind, key, in_lists), "w") == "x"  # deepest part at depth 63
    with pytest.raises(RequestError) as err:
        content_text(_chain(33, kind, key, in_lists), "w")
    assert err.value.message == "w: content is nested more than 64 levels deep"


def test_deeply_nested_tools_are_a_400_not_a_crash() -> None:
    deep: object = 1
    for _ in range(300):
        deep = [deep]
    refused(
        "request body is nested too deeply", body(messages=[{"role": "user", "content": "x"}], tools=deep)
    )


def test_parsed_body_is_a_frozen_snapshot() -> None:
    p = parse_body(body(prompt="p"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.turn = 3  # type: ignore[misc]
    assert not hasattr(p, "__dict__")


def test_a_previous_response_id_of_256_characters_is_kept_and_of_257_dropped() -> None:
    """A Responses follow-up's previous_response_id is read up to 256 characters (longer: not an id
    any engine made; the follow-up is routed by the policy)."""

    def prev(rid: str) -> str:
        p = parse_body(
            orjson.dumps({"model": "m", "input": "x", "previous_response_id": rid}), "/v1/responses"
        )
        return p.previous_response_id

    assert prev("r" * 256) == "r" * 256
    assert prev("r" * 257) == ""
