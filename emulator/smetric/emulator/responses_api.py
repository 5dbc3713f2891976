"""OpenAI Responses (``POST /v1/responses``) as vLLM 0.32 serves it (without harmony).

Sources (vLLM 0.32.0, ``vllm/entrypoints/openai/responses/``):

* ``protocol.py``: ``ResponsesRequest`` (``input`` a string or a list of items, ``instructions``,
  ``max_output_tokens``, ``stream``, ``tools``) and ``ResponsesResponse`` (l. 789-935: the body's
  fields; ``from_request`` sets ``incomplete_details {reason: "max_output_tokens"}`` when the status
  is ``incomplete``).
* ``serving.py`` ``responses_full_generator`` (l. 770-935): ``status = "incomplete"`` when the
  output stopped on ``length`` (always, in the emulator), and the usage ``ResponseUsage``:
  ``input_tokens`` (the whole prompt), ``input_tokens_details {cached_tokens, cache_write_tokens}``,
  ``output_tokens``, ``output_tokens_details {reasoning_tokens: 0, tool_output_tokens: 0}``,
  ``total_tokens``.
* ``serving.py`` ``responses_stream_generator`` (l. 1330-1424): ``response.created`` and
  ``response.in_progress`` go out at once, before the engine produced anything, then the output
  events, then ``response.completed`` with the full response; every event carries
  ``sequence_number`` from 0.
* ``streaming_events.py`` (l. 835-953): ``response.output_item.added`` (a ``message`` item, id
  ``msg_...``, ``in_progress``), ``response.content_part.added`` (``output_text``), one
  ``response.output_text.delta`` per chunk, then ``response.output_text.done``,
  ``response.content_part.done``, ``response.output_item.done``.
* ``api_router.py`` ``_convert_stream_to_sse_events`` (l. 34-45): each event framed
  ``event: <type>\\ndata: <json>\\n\\n``; errors before the stream are vLLM's OpenAI error body.

Stored responses (``serving.py`` ``create_responses``): a completed response is kept in the
instance's memory unless the request says ``store: false`` (vLLM stores it when
``VLLM_ENABLE_RESPONSES_API_STORE`` is set); a request whose ``previous_response_id`` this instance
does not hold gets vLLM's 404 ``Response with id '...' not found.`` (``_make_not_found_error``) --
a follow-up sent to another engine fails. Only the ids are kept (:class:`ResponseStore`, bounded):
the follow-up's prompt is what the request carries.

Because the first bytes of a Responses stream precede the first token, a client (or the picker)
that times the first token must wait for the first ``response.output_text.delta``.

Rendering: one ``{role, content}`` per input item, exactly as the picker's parser lists them for its
precise index (``epp/parse/body.py``): ``instructions`` as a system message, ``message`` items by
role with their text parts, ``function_call`` / ``reasoning`` items as assistant text (name +
arguments, summary), ``function_call_output`` items as tool text.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from smetric.emulator.config import DEFAULT_MAX_TOKENS
from smetric.emulator.protocol import SERVER_TIMING_FIELD, ApiError, UsageFacts

STREAM_EVENTS: tuple[str, ...] = (
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
)

_ASSISTANT_ITEMS = frozenset({"function_call", "reasoning", "custom_tool_call"})
_TOOL_ITEMS = frozenset({"function_call_output", "custom_tool_call_output"})
MAX_DEPTH = 64  # nesting of parts the text extraction follows (a hostile body is a 400, not a crash)


class ResponsesRequest(BaseModel):
    """vLLM's ``ResponsesRequest``; sampling and tool fields are accepted and ignored."""

    model_config = ConfigDict(extra="allow")
    model: str = ""
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, gt=0)
    stream: bool | None = False
    tools: list[dict[str, Any]] | None = None
    previous_response_id: str | None = None

    @field_validator("input")
    @classmethod
    def _not_empty(cls, value: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
        if isinstance(value, list) and not value:
            raise ValueError("input must not be an empty list")
        return value

    @property
    def output_tokens(self) -> int:
        return self.max_output_tokens if self.max_output_tokens is not None else DEFAULT_MAX_TOKENS

    @property
    def streaming(self) -> bool:
        return bool(self.stream)

    def render_messages(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.instructions:
            out.append({"role": "system", "content": self.instructions})
        if isinstance(self.input, str):
            out.append({"role": "user", "content": self.input})
            return out
        for i, item in enumerate(self.input):
            kind = item.get("type", "message")
            role = item.get("role")
            where = f"input[{i}]"
            if kind == "message" or (isinstance(role, str) and kind not in _ASSISTANT_ITEMS | _TOOL_ITEMS):
                role_s = role if isinstance(role, str) and role else "user"
                out.append({"role": role_s, "content": _text(item.get("content"), where, 0)})
            elif kind in _ASSISTANT_ITEMS:
                out.append({"role": "assistant", "content": _part(item, where, 0)})
            else:
                out.append({"role": "tool", "content": _part(item, where, 0)})
        return out


def _part(part: object, where: str, depth: int) -> str:
    if depth > MAX_DEPTH:
        raise ApiError(400, f"{where}: content is nested more than {MAX_DEPTH} levels deep", "input")
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        raise ApiError(400, f"{where}: a content part must be an object or a string", "input")
    text = part.get("text")
    if isinstance(text, str):
        return text
    kind = part.get("type")
    if kind in ("function_call", "custom_tool_call"):
        return f"{part.get('name', '')}{part.get('arguments', part.get('input', ''))}"
    if kind in _TOOL_ITEMS:
        return _text(part.get("output"), where, depth + 1)
    if kind == "reasoning":
        return _text(part.get("summary"), where, depth + 1)
    return ""


def _text(content: object, where: str, depth: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_part(p, where, depth + 1) for p in content)
    if isinstance(content, dict):
        return _part(content, where, depth + 1)
    raise ApiError(400, f"{where}: content must be a string or a list of parts", "input")


def usage(u: UsageFacts) -> dict[str, Any]:
    """vLLM's ``ResponseUsage`` of a single-turn (non-harmony) request: the per-turn lists are empty."""
    return {
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {
            "cache_write_tokens": u.cache_creation_tokens,
            "cached_tokens": u.cached_tokens,
            "input_tokens_per_turn": [],
            "cached_tokens_per_turn": [],
        },
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {
            "reasoning_tokens": 0,
            "tool_output_tokens": 0,
            "output_tokens_per_turn": [],
            "tool_output_tokens_per_turn": [],
        },
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    }


class ResponseStore:
    """The ids of the responses one instance stored, oldest dropped past ``max_entries``."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self.max_entries = max_entries
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, response_id: object) -> bool:
        return response_id in self._ids

    def add(self, response_id: str) -> None:
        self._ids[response_id] = None
        self._ids.move_to_end(response_id)
        while len(self._ids) > self.max_entries:
            self._ids.popitem(last=False)

    def check(self, req: ResponsesRequest) -> None:
        """vLLM's 404 for a ``previous_response_id`` this instance does not hold."""
        prev = req.previous_response_id
        if prev is not None and prev not in self:
            raise ApiError(404, f"Response with id '{prev}' not found.", "previous_response_id")


class ResponsesShaper:
    """The bodies and stream events of one ``/v1/responses`` request."""

    opens_early = True  # response.created / response.in_progress precede the first token
    param = "input"

    def __init__(self, request_id: str, model: str, req: ResponsesRequest) -> None:
        self.id = "resp_" + request_id
        self.item_id = "msg_" + uuid.uuid4().hex
        self.model = model
        self.req = req
        self.created = int(time.time())
        self._seq = 0

    @property
    def stores(self) -> bool:
        return (self.req.model_extra or {}).get("store", True) is not False

    def _event(self, body: dict[str, Any]) -> dict[str, Any]:
        body["sequence_number"] = self._seq
        self._seq += 1
        return body

    def error_body(self, exc: ApiError) -> dict[str, Any]:
        return exc.body()

    def _response(self, status: str, output: list[dict[str, Any]], u: UsageFacts | None) -> dict[str, Any]:
        extra = self.req.model_extra or {}
        return {
            "id": self.id,
            "created_at": self.created,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": self.req.instructions,
            "metadata": extra.get("metadata"),
            "model": self.model,
            "object": "response",
            "output": output,
            "parallel_tool_calls": extra.get("parallel_tool_calls", True),
            "temperature": extra.get("temperature", 1.0),
            "tool_choice": extra.get("tool_choice", "auto"),
            "tools": self.req.tools or [],
            "top_p": extra.get("top_p", 1.0),
            "background": False,
            "max_output_tokens": self.req.output_tokens,
            "max_tool_calls": None,
            "previous_response_id": self.req.previous_response_id,
            "prompt": None,
            "reasoning": None,
            "service_tier": "auto",
            "status": status,
            "text": None,
            "top_logprobs": None,
            "truncation": "disabled",
            "usage": usage(u) if u is not None else None,
            "user": None,
        }

    def _item(self, text: str, status: str) -> dict[str, Any]:
        part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": [], "logprobs": None}
        return {
            "id": self.item_id,
            "type": "message",
            "role": "assistant",
            "content": [part] if status == "completed" else [],
            "status": status,
        }

    def opening(self, u: UsageFacts) -> list[dict[str, Any]]:
        initial = self._response("in_progress", [], None)
        return [
            self._event({"type": "response.created", "response": initial}),
            self._event({"type": "response.in_progress", "response": initial}),
        ]

    def first(self, u: UsageFacts) -> list[dict[str, Any]]:
        return [
            self._event(
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": self._item("", "in_progress"),
                }
            ),
            self._event(
                {
                    "type": "response.content_part.added",
                    "output_index": 0,
                    "item_id": self.item_id,
                    "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []},
                }
            ),
        ]

    def delta(self, text: str) -> dict[str, Any]:
        return self._event(
            {
                "type": "response.output_text.delta",
                "content_index": 0,
                "output_index": 0,
                "item_id": self.item_id,
                "delta": text,
                "logprobs": [],
            }
        )

    def closing(self, u: UsageFacts, timing: dict[str, Any], text: str = "") -> list[dict[str, Any]]:
        item = self._item(text, "completed")
        done = self._response("incomplete", [item], u)
        if timing:
            done[SERVER_TIMING_FIELD] = timing
        where = {"output_index": 0, "item_id": self.item_id, "content_index": 0}
        return [
            self._event({"type": "response.output_text.done", **where, "text": text, "logprobs": []}),
            self._event({"type": "response.content_part.done", **where, "part": item["content"][0]}),
            self._event({"type": "response.output_item.done", "output_index": 0, "item": item}),
            self._event({"type": "response.completed", "response": done}),
        ]

    def failure(self, message: str) -> dict[str, Any]:
        return self._event(
            {"type": "error", "code": "InternalServerError", "message": message, "param": None}
        )

    def full(self, text: str, u: UsageFacts) -> dict[str, Any]:
        return self._response("incomplete", [self._item(text, "completed")], u)
