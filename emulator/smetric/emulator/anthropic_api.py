"""Anthropic Messages (``POST /v1/messages``) as vLLM 0.32 serves it.

Sources (vLLM 0.32.0, ``vllm/entrypoints/anthropic/``):

* ``protocol.py``: the request (``AnthropicMessagesRequest``: ``model``, ``messages``, ``max_tokens``
  > 0 required, ``system`` a string or text blocks, ``tools``, ``stream``), the message roles
  (``user``/``assistant``, Claude Code's ``ctx``/``msg`` read as ``user``), the content block types
  and the usage (``AnthropicUsage``: ``input_tokens``, ``output_tokens``,
  ``cache_creation_input_tokens``, ``cache_read_input_tokens``).
* ``serving.py`` ``_build_anthropic_usage`` (l. 63-99): vLLM's ``prompt_tokens`` is the whole prompt,
  so ``input_tokens = prompt_tokens - cache_read - cache_creation``, the cache fields taken from
  ``prompt_tokens_details`` (``cached_tokens``, ``created_cache_tokens``) when the server reports
  them (``--enable-prompt-tokens-details``; the emulator always does, as its chat usage does).
* ``serving.py`` ``message_stream_converter`` (l. 882-1233): ``message_start`` on the chat stream's
  first chunk (the first token) with ``usage {input_tokens: prompt, output_tokens: 0}`` and no cache
  fields, ``content_block_start`` of a ``text`` block at the first text, one
  ``content_block_delta``/``text_delta`` per chunk, then ``content_block_stop``, ``message_delta``
  (``stop_reason``, ``stop_sequence``, the final usage with the cache fields) and ``message_stop``;
  every event framed ``event: <type>\\ndata: <json>\\n\\n`` (``wrap_data_with_event``, l. 142).
* ``serving.py`` ``_to_anthropic_stop_reason`` (l. 102-131): ``finish_reason == "length"`` is
  ``max_tokens`` (the emulator always generates exactly ``max_tokens``).
* ``serving.py`` ``messages_full_converter`` (l. 825-880): the non-streaming body, the chat
  completion's id (``chatcmpl-...``), dumped with ``exclude_none``.
* ``serving.py`` ``count_tokens`` (l. 1235-1268): ``POST /v1/messages/count_tokens`` renders the
  request as a generation would and answers ``{"input_tokens": N, "context_management":
  {"original_input_tokens": N}}``; nothing runs on the engine.
* ``api_router.py`` ``translate_error_response`` (l. 39-48): errors from the handler come as
  ``{"type": "error", "error": {"type": <vLLM's error type>, "message": ...}}`` with the status.
  A body that fails validation is answered by vLLM's generic validation handler
  (``serve/exception_handling/handlers/validation.py``, l. 149-195) in the OpenAI shape; the
  emulator does the same.

Rendering: the picker's precise index renders ``[{"role": "system", "content": system}, *messages]``
(``epp/parse/body.py``); the emulator renders the same list with the same tokenizer, so both see one
token sequence and the prefix hits agree. With the fallback tokenizer that is the text of every text
block and ``tool_result`` content in order; ``tool_use`` blocks add no text.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from smetric.emulator.protocol import SERVER_TIMING_FIELD, ApiError, UsageFacts

STREAM_EVENTS: tuple[str, ...] = (
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
)

_BLOCK_TYPES = Literal[
    "text", "image", "tool_use", "tool_result", "tool_reference", "thinking", "redacted_thinking"
]


class ContentBlock(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: _BLOCK_TYPES
    text: str | None = None
    id: str | None = None
    tool_use_id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    content: str | list[dict[str, Any]] | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]

    @field_validator("role", mode="before")
    @classmethod
    def _claude_code_roles(cls, value: object) -> object:
        return {"ctx": "user", "msg": "user"}.get(value, value) if isinstance(value, str) else value


class Tool(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    description: str | None = None
    input_schema: dict[str, Any]


class MessagesRequest(BaseModel):
    """vLLM's ``AnthropicMessagesRequest``; sampling fields are accepted and ignored."""

    model_config = ConfigDict(extra="allow")
    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    max_tokens: int = Field(gt=0)
    stream: bool | None = False
    system: str | list[ContentBlock] | None = None
    tools: list[Tool] | None = None
    stop_sequences: list[str] | None = None

    @property
    def output_tokens(self) -> int:
        return self.max_tokens

    @property
    def streaming(self) -> bool:
        return bool(self.stream)

    def render_messages(self) -> list[dict[str, Any]]:
        """What the engine's chat template (and the picker's precise index) renders."""
        out: list[dict[str, Any]] = []
        if self.system is not None:
            out.append({"role": "system", "content": _dump(self.system)})
        out.extend({"role": m.role, "content": _dump(m.content)} for m in self.messages)
        return out


class CountTokensRequest(MessagesRequest):
    """vLLM's ``AnthropicCountTokensRequest``: a Messages request without ``max_tokens``."""

    max_tokens: int = Field(default=1, gt=0)


def count_tokens_body(input_tokens: int) -> dict[str, Any]:
    """``AnthropicCountTokensResponse`` (``serving.py`` ``count_tokens``, l. 1235-1268), dumped
    without ``None`` fields (``api_router.py``)."""
    return {"input_tokens": input_tokens, "context_management": {"original_input_tokens": input_tokens}}


def _dump(content: str | list[ContentBlock]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    return [b.model_dump(exclude_none=True) for b in content]


def usage(u: UsageFacts, final: bool) -> dict[str, Any]:
    """vLLM's ``_build_anthropic_usage``: the start event has the prompt only, the final one the
    uncached part in ``input_tokens`` and the cache fields beside it."""
    if not final:
        return {"input_tokens": u.prompt_tokens, "output_tokens": 0}
    return {
        "input_tokens": max(0, u.prompt_tokens - u.cached_tokens - u.cache_creation_tokens),
        "output_tokens": u.completion_tokens,
        "cache_read_input_tokens": u.cached_tokens,
        "cache_creation_input_tokens": u.cache_creation_tokens,
    }


def error_body(exc: ApiError) -> dict[str, Any]:
    """``translate_error_response``: vLLM's error type and message in Anthropic's envelope."""
    return {"type": "error", "error": {"type": exc.kind, "message": exc.message}}


class AnthropicShaper:
    """The bodies and stream events of one ``/v1/messages`` request."""

    opens_early = False  # vLLM's first event is the first token's (message_start)
    param = "messages"

    def __init__(self, request_id: str, model: str) -> None:
        self.id = "chatcmpl-" + request_id
        self.model = model

    def error_body(self, exc: ApiError) -> dict[str, Any]:
        return error_body(exc)

    def opening(self, u: UsageFacts) -> list[dict[str, Any]]:
        return []

    def first(self, u: UsageFacts) -> list[dict[str, Any]]:
        message: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage(u, final=False),
        }
        return [
            {"type": "message_start", "message": message},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ]

    def delta(self, text: str) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}

    def closing(self, u: UsageFacts, timing: dict[str, Any], text: str = "") -> list[dict[str, Any]]:
        end = {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
            "usage": usage(u, final=True),
        }
        if timing:
            end[SERVER_TIMING_FIELD] = timing
        return [{"type": "content_block_stop", "index": 0}, end, {"type": "message_stop"}]

    def failure(self, message: str) -> dict[str, Any]:
        """The stream's error event (vLLM's converter sends ``internal_error``)."""
        return {"type": "error", "error": {"type": "internal_error", "message": message}}

    def full(self, text: str, u: UsageFacts) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": text}],
            "model": self.model,
            "stop_reason": "max_tokens",
            "usage": usage(u, final=True),
        }
