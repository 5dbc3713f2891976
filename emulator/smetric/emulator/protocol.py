"""OpenAI request parsing (pydantic, the trust boundary) and vLLM-shaped response bodies."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from smetric.emulator.config import DEFAULT_MAX_TOKENS

# Extra field of the final usage chunk (not vLLM's): the request's first/last-token times on the
# server, wall seconds since its HTTP request arrived, and the modelled engine times in model
# seconds (docs/bench.md, "time accounting"). Clients that do not know it ignore it.
SERVER_TIMING_FIELD = "smetric_server_timing"

_ERROR_TYPES: Mapping[int, str] = MappingProxyType(
    {
        400: "BadRequestError",
        404: "NotFoundError",
        429: "TooManyRequestsError",
        503: "ServiceUnavailableError",
    }
)


class ApiError(Exception):
    """An error answered as OpenAI/vLLM's ``{"error": {...}}`` body with an HTTP status (the
    Anthropic route wraps the same fields in its own shape); ``retry_after_s`` > 0 adds a
    ``retry-after`` header."""

    def __init__(self, status: int, message: str, param: str | None = None, retry_after_s: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.retry_after_s = retry_after_s

    @property
    def kind(self) -> str:
        return _ERROR_TYPES.get(self.status, "InternalServerError")

    @property
    def headers(self) -> dict[str, str]:
        return {"retry-after": str(self.retry_after_s)} if self.retry_after_s > 0 else {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}
        }


class BodyError(ApiError):
    """A body that does not decode or validate: vLLM's generic validation handler answers it in the
    OpenAI error shape on every route (``serve/exception_handling/handlers/validation.py``)."""


@dataclass(frozen=True, slots=True)
class UsageFacts:
    """A request's token counts as vLLM's output processor knows them: the whole prompt, the
    generated tokens, the prompt tokens read from the prefix cache (local + global tier) and the
    prompt tokens newly written to it (the full prompt blocks not hit: vLLM's
    ``num_cache_creation_tokens``, ``v1/metrics/stats.py`` ``finalize``)."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cache_creation_tokens: int

    @classmethod
    def of(
        cls, prompt_tokens: int, completion_tokens: int, cached_tokens: int, block_size: int
    ) -> UsageFacts:
        created = max(0, prompt_tokens - prompt_tokens % block_size - cached_tokens)
        return cls(prompt_tokens, completion_tokens, cached_tokens, created)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: bool = False
    continuous_usage_stats: bool = False


class _Common(BaseModel):
    """Fields both endpoints share; sampling parameters are accepted and ignored."""

    model_config = ConfigDict(extra="allow")
    model: str = ""
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=0)
    max_completion_tokens: int | None = Field(default=None, ge=0)
    min_tokens: int = Field(default=0, ge=0)
    ignore_eos: bool = False
    n: int = Field(default=1, ge=1, le=1)

    @property
    def output_tokens(self) -> int:
        """Exactly this many tokens are generated (the emulator never stops early)."""
        for value in (self.max_completion_tokens, self.max_tokens):
            if value is not None:
                return max(value, self.min_tokens, 1)
        return max(DEFAULT_MAX_TOKENS, self.min_tokens)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[Any] | None = None


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)


class CompletionRequest(_Common):
    prompt: str | list[int] | list[str]

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[int] | list[str]) -> str | list[int] | list[str]:
        if isinstance(value, list) and value and isinstance(value[0], str) and len(value) != 1:
            raise ValueError("only one prompt per request is supported")
        return value


def completion_input(prompt: str | list[int] | list[str]) -> str | list[int]:
    """The one prompt of a completion request: a string, or token ids (``[]`` if empty)."""
    if isinstance(prompt, str):
        return prompt
    if prompt and isinstance(prompt[0], str):
        return str(prompt[0])
    return [int(t) for t in prompt]


def parse_request(kind: Literal["chat", "completion"], body: Any) -> ChatRequest | CompletionRequest:
    """Validate a decoded JSON body; raises :class:`ApiError` (400) with pydantic's reason."""
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    try:
        if kind == "chat":
            return ChatRequest.model_validate(body)
        return CompletionRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or None
        raise ApiError(400, f"invalid request: {where}: {first.get('msg')}", where) from None


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


class ResponseShaper:
    """Builds the chunk / full-response bodies of one request, shaped like vLLM's."""

    def __init__(self, kind: Literal["chat", "completion"], request_id: str, model: str) -> None:
        self.kind = kind
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + request_id
        self.model = model
        self.created = int(time.time())

    def _envelope(self, choices: list[dict[str, Any]], chunk: bool) -> dict[str, Any]:
        if self.kind == "chat":
            obj = "chat.completion.chunk" if chunk else "chat.completion"
        else:
            obj = "text_completion"
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def chunk(self, text: str, finish_reason: str | None = None, first: bool = False) -> dict[str, Any]:
        if self.kind == "chat":
            delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {"content": text}
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None}
        choice["finish_reason"] = finish_reason
        choice["stop_reason"] = None
        return self._envelope([choice], chunk=True)

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
        body = self._envelope([], chunk=True)
        body["usage"] = usage(prompt_tokens, completion_tokens, cached_tokens)
        return body

    def full(
        self, text: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int
    ) -> dict[str, Any]:
        if self.kind == "chat":
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
            }
        else:
            choice = {"index": 0, "text": text}
        choice.update(logprobs=None, finish_reason="length", stop_reason=None)
        body = self._envelope([choice], chunk=False)
        body["usage"] = usage(prompt_tokens, completion_tokens, cached_tokens)
        return body
