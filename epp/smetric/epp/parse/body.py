"""Request bodies: OpenAI chat completions / completions / Responses, Anthropic Messages.

The prompt text is the messages' contents concatenated in order, each prefixed by a role marker
(``<|role|>``), with tool definitions first -- a stable rendering in which turn *k+1*'s text starts
with turn *k*'s text plus its answer, which is all a prefix index needs. (The precise index may
re-render with the model's real chat template from the same messages.) Token counts are estimated
as ``ceil(chars / 4)`` because the picker runs without a tokenizer on its hot path.

``turn``: number of earlier assistant messages (Responses API: runs of assistant-produced items --
``message`` with role assistant, ``function_call``, ``reasoning`` -- count once per run, as one model
turn emits several items). ``est_hit_tokens``: estimated tokens of the prompt up to and including
the last assistant message. A completions prompt is turn 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from smetric.epp.parse.errors import RequestError

API_CHAT = "chat"
API_COMPLETIONS = "completions"
API_RESPONSES = "responses"
API_ANTHROPIC = "anthropic"

_ASSISTANT_ITEM_TYPES = frozenset({"function_call", "reasoning", "custom_tool_call"})
_TOOL_ITEM_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})


@dataclass(frozen=True, slots=True)
class ParsedBody:
    api: str
    model: str
    prompt_text: str
    prompt_tokens: int
    turn: int
    est_hit_tokens: int
    stream: bool
    token_ids: tuple[int, ...] = ()
    # The conversation as the engine receives it (chat: the request's own ``messages``; Anthropic:
    # its ``system`` first; Responses: one ``{role, content}`` per input item); empty for
    # completions. A precise prefix index renders these with the engine's chat template.
    messages: tuple[Any, ...] = ()
    # Responses: the ``previous_response_id`` the request continues ("" none, or not a string of
    # at most MAX_RESPONSE_ID_CHARS): the picker routes it to the engine holding that response.
    previous_response_id: str = ""


MAX_RESPONSE_ID_CHARS = 256


def estimate_tokens(chars: int) -> int:
    """chars / 4, rounded up (no tokenizer on the hot path)."""
    return (chars + 3) // 4


# Content parts nest (an Anthropic tool_result holds content that holds parts ...): real agent
# transcripts nest a few levels; a hostile body nests hundreds (each level a Python frame). Past this
# depth the body is refused with 400 instead of exhausting the stack (stated assumption: 64 is far
# above any API's documented nesting).
MAX_CONTENT_DEPTH = 64  # list and part levels both count: ~32 levels of tool_result


def _dumps(value: object) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONEncodeError as exc:  # orjson refuses > 254 levels
        raise RequestError(400, f"request body is nested too deeply: {exc}") from None


def _part_text(part: object, where: str, depth: int = 0) -> str:
    if depth > MAX_CONTENT_DEPTH:
        raise RequestError(400, f"{where}: content is nested more than {MAX_CONTENT_DEPTH} levels deep")
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        raise RequestError(400, f"{where}: a content part must be an object or a string")
    text = part.get("text")
    if isinstance(text, str):
        return text
    kind = part.get("type")
    if kind == "tool_use":  # Anthropic assistant tool call
        return f"{part.get('name', '')}{_dumps(part.get('input', {}))}"
    if kind == "tool_result":  # Anthropic tool output (inside a user message)
        return content_text(part.get("content"), where, depth + 1)
    if kind in ("function_call", "custom_tool_call"):
        return f"{part.get('name', '')}{part.get('arguments', part.get('input', ''))}"
    if kind in _TOOL_ITEM_TYPES:
        return content_text(part.get("output"), where, depth + 1)
    if kind == "reasoning":
        return content_text(part.get("summary"), where, depth + 1)
    return ""  # images, audio, files: no text for the prefix index or the length estimate


def content_text(content: object, where: str, depth: int = 0) -> str:
    """Text of an OpenAI / Anthropic ``content`` (string, one part, or a list of parts); more than
    :data:`MAX_CONTENT_DEPTH` nested levels is a 400."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_part_text(p, where, depth + 1) for p in content)
    if isinstance(content, dict):
        return _part_text(content, where, depth + 1)
    raise RequestError(400, f"{where}: content must be a string or a list of parts")


class _Renderer:
    """Accumulates role-marked segments; remembers where the last assistant segment ended."""

    __slots__ = ("_chars", "_in_assistant_run", "_parts", "hit_chars", "messages", "turn")

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._chars = 0
        self._in_assistant_run = False
        self.hit_chars = 0
        self.turn = 0
        self.messages: list[Any] = []

    def add(self, role: str, text: str, *, assistant: bool = False, group_runs: bool = False) -> None:
        segment = f"<|{role}|>{text}\n"
        self._parts.append(segment)
        self._chars += len(segment)
        if assistant:
            if not (group_runs and self._in_assistant_run):
                self.turn += 1
            self.hit_chars = self._chars
        self._in_assistant_run = assistant

    def text(self) -> str:
        return "".join(self._parts)


def _tools_prefix(body: dict[str, Any], r: _Renderer) -> None:
    tools = body.get("tools")
    if tools:
        r.add("tools", _dumps(tools))


def _chat(body: dict[str, Any], r: _Renderer) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty list")
    _tools_prefix(body, r)
    system = body.get("system")  # Anthropic Messages keeps the system prompt outside `messages`
    if system is not None:
        r.add("system", content_text(system, "system"))
        r.messages.append({"role": "system", "content": system})
    r.messages.extend(messages)
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise RequestError(400, f"messages[{i}] must be an object")
        role = msg.get("role")
        if not isinstance(role, str) or not role:
            raise RequestError(400, f"messages[{i}].role must be a non-empty string")
        text = content_text(msg.get("content"), f"messages[{i}]")
        calls = msg.get("tool_calls")
        if isinstance(calls, list):  # OpenAI assistant tool calls
            text += "".join(_part_text({"type": "function_call", **_fn(c)}, f"messages[{i}]") for c in calls)
        r.add(role, text, assistant=role == "assistant")


def _fn(call: object) -> dict[str, Any]:
    if isinstance(call, dict) and isinstance(call.get("function"), dict):
        fn: dict[str, Any] = call["function"]
        return fn
    return {}


def _responses(body: dict[str, Any], r: _Renderer) -> None:
    def emit(role: str, text: str, assistant: bool = False) -> None:
        r.add(role, text, assistant=assistant, group_runs=True)
        r.messages.append({"role": role, "content": text})

    _tools_prefix(body, r)
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        emit("system", instructions)
    items = body.get("input")
    if isinstance(items, str):
        emit("user", items)
        return
    if not isinstance(items, list) or not items:
        raise RequestError(400, "'input' must be a string or a non-empty list")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise RequestError(400, f"input[{i}] must be an object")
        kind = item.get("type", "message")
        role = item.get("role")
        where = f"input[{i}]"
        if kind == "message" or (
            isinstance(role, str) and kind not in _ASSISTANT_ITEM_TYPES | _TOOL_ITEM_TYPES
        ):
            role_s = role if isinstance(role, str) and role else "user"
            emit(role_s, content_text(item.get("content"), where), assistant=role_s == "assistant")
        elif kind in _ASSISTANT_ITEM_TYPES:
            emit("assistant", _part_text(item, where), assistant=True)
        else:
            emit("tool", _part_text(item, where))


def _completions(body: dict[str, Any]) -> tuple[str, tuple[int, ...]]:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt, ()
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return "\n".join(prompt), ()
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return "", tuple(prompt)
    raise RequestError(400, "'prompt' must be a string, a list of strings or a list of token ids")


def detect_api(path: str, body: dict[str, Any]) -> str:
    route = path.split("?", 1)[0].rstrip("/")
    if route.endswith("/chat/completions"):
        return API_CHAT
    if route.endswith("/completions"):
        return API_COMPLETIONS
    if route.endswith("/responses"):
        return API_RESPONSES
    if route.endswith("/messages"):
        return API_ANTHROPIC
    if "messages" in body:
        return API_ANTHROPIC if "system" in body else API_CHAT
    if "prompt" in body:
        return API_COMPLETIONS
    if "input" in body:
        return API_RESPONSES
    raise RequestError(400, f"unsupported request shape for path {path!r}: no messages, prompt or input")


def parse_body(body: bytes | bytearray | memoryview, path: str = "") -> ParsedBody:
    """Parse a complete request body. Raises :class:`RequestError` (status 400) on bad input."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RequestError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise RequestError(400, "request body must be a JSON object")
    model = doc.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError(400, "request body has no 'model' (a non-empty string)")
    stream = doc.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(400, "'stream' must be a boolean")
    api = detect_api(path, doc)
    if api == API_COMPLETIONS:
        text, ids = _completions(doc)
        tokens = len(ids) if ids else estimate_tokens(len(text))
        return ParsedBody(api, model, text, tokens, 0, 0, stream, ids)
    r = _Renderer()
    previous = ""
    if api == API_RESPONSES:
        _responses(doc, r)
        prev = doc.get("previous_response_id")
        if isinstance(prev, str) and len(prev) <= MAX_RESPONSE_ID_CHARS:
            previous = prev
    else:
        _chat(doc, r)
    text = r.text()
    return ParsedBody(
        api,
        model,
        text,
        estimate_tokens(len(text)),
        r.turn,
        estimate_tokens(r.hit_chars),
        stream,
        messages=tuple(r.messages),
        previous_response_id=previous,
    )
