"""Chaos rows over the agents' own APIs: the body, header and long-quiet faults again, sent as
Anthropic Messages (``/v1/messages``, what Claude Code speaks) and, for the long quiet prefill, as
OpenAI Responses (``/v1/responses``, whose stream opens before the first token).

Each row names its guard. The header and long-quiet rows check guards registered in
:mod:`smetric.bench.chaos.guards`; :func:`with_these_rows` adds this module's faults to those
guards, so ``smetric chaos --guard-off`` runs them too. The body-size row checks the picker's own
``--max-body-bytes`` limit, registered here (:data:`GUARDS`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import aiohttp

from smetric.bench.chaos.bodies import from_picker
from smetric.bench.chaos.guards import BODY_LIMITS, PICKER_PINGS, SCRUB, Guard
from smetric.bench.chaos.headers import QUIET_PAST_S
from smetric.bench.chaos.row import Row
from smetric.bench.chaos.stack import MODEL, ChaosStack, Reply, chat
from smetric.bench.procs import free_port

MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01"}
BODY_SIZE = "picker request body size limit"
BODY_PARSING = BODY_LIMITS  # the chat body rows' guard: nesting depth and JSON checks
LIMIT_BYTES = 16 << 20  # the picker's default --max-body-bytes


def messages(session: str, turns: int, *, max_tokens: int = 16, filler: int = 40) -> dict[str, Any]:
    """:func:`~smetric.bench.chaos.stack.chat`'s conversation as an Anthropic Messages request with
    tool turns: the system prompt top-level, each tool output a ``tool_result`` after the
    assistant's ``tool_use``."""
    base = chat(session, turns, max_tokens=max_tokens, filler=filler)
    msgs: list[dict[str, Any]] = []
    system = ""
    turns_of: list[dict[str, str]] = base["messages"]  # type: ignore[assignment]
    for i, m in enumerate(turns_of):
        if m["role"] == "system":
            system = m["content"]
        elif m["role"] == "assistant":
            use = {"type": "tool_use", "id": f"t{i}", "name": "bash", "input": {"cmd": "make test"}}
            msgs.append({"role": "assistant", "content": [{"type": "text", "text": m["content"]}, use]})
        elif msgs and msgs[-1]["role"] == "assistant":
            result = {"type": "tool_result", "tool_use_id": f"t{i - 1}", "content": m["content"]}
            msgs.append({"role": "user", "content": [result]})
        else:
            msgs.append({"role": "user", "content": m["content"]})
    return {"model": MODEL, "system": system, "messages": msgs, "stream": True, "max_tokens": max_tokens}


def responses(session: str, turns: int, *, max_tokens: int = 16, filler: int = 40) -> dict[str, Any]:
    """The same conversation as an OpenAI Responses request (instructions + input items)."""
    base = chat(session, turns, max_tokens=max_tokens, filler=filler)
    turns_of: list[dict[str, str]] = base["messages"]  # type: ignore[assignment]
    items = [{"role": m["role"], "content": m["content"]} for m in turns_of[1:]]
    system = turns_of[0]["content"]
    return {
        "model": MODEL,
        "instructions": system,
        "input": items,
        "stream": True,
        "max_output_tokens": max_tokens,
    }


def completed(r: Reply, end: bytes) -> bool:
    """A 200 stream that reached its API's last event (these streams end without ``[DONE]``)."""
    return r.status == 200 and r.error in ("", "stream ended without [DONE]") and end in r.body


async def messages_headers(st: ChaosStack, quick: bool) -> list[Row]:
    """Client routing headers on ``/v1/messages``: through the stack's gateway, and through a
    FailOpen gateway (ORIGINAL_DST, picker unreachable) where only the scrub keeps the client's
    destination header away from the router."""
    admin = f"127.0.0.1:{st.admin_port}"
    hostile = {
        **ANTHROPIC_HEADERS,
        "x-gateway-destination-endpoint": admin,
        "x-smetric-destination-primary": admin,
        "x-envoy-original-dst-host": admin,
        "x-prefiller-host-port": "10.255.0.1:1",
    }
    tag = time.monotonic_ns()
    replies = await asyncio.gather(
        *(st.post(messages(f"mh-{tag}-{i}", 1), hostile, path=MESSAGES) for i in range(3))
    )
    pool = {*st.endpoints}
    steer_ok = all(completed(r, b"event: message_stop") and r.served in pool for r in replies)
    open_url, open_admin = await st.start_gateway(
        "envoy-failopen-messages",
        failure_mode_allow=True,
        picker_port=free_port(),
        request_body_mode="BUFFERED",
    )
    try:
        steer = {**hostile, "x-smetric-destination-primary": f"127.0.0.1:{open_admin}"}
        opened = [
            await st.post(messages(f"mh-open-{tag}-{i}", 0), steer, path=MESSAGES, url=open_url)
            for i in range(2)
        ]
    finally:
        await st.sup.stop("envoy-failopen-messages")
    open_ok = all(r.status and r.served in pool | {"", "-"} for r in opened)
    return [
        Row(
            "client routing headers on /v1/messages (admin address, prefiller), also through a FailOpen "
            "gateway whose picker is unreachable",
            "Anthropic streams complete on pool endpoints; FailOpen: never sent to the client's address",
            f"{sum(completed(r, b'event: message_stop') for r in replies)}/3 complete on "
            f"{sorted({r.served for r in replies})}; FailOpen: {[(r.status, r.served) for r in opened]}",
            steer_ok and open_ok,
            SCRUB,
        )
    ]


def _nested_tool_results(depth: int) -> bytes:
    content = b'[{"type":"tool_result","tool_use_id":"t","content":' * depth + b'"x"' + b"}]" * depth
    return (
        b'{"model":"'
        + MODEL.encode()
        + b'","max_tokens":4,"messages":[{"role":"user","content":'
        + content
        + b"}]}"
    )


async def messages_bodies(st: ChaosStack, quick: bool) -> list[Row]:
    """Hostile bodies on ``/v1/messages``: nested tool results, not JSON, one byte past the limit."""
    h = ANTHROPIC_HEADERS
    nested = await st.post(_nested_tool_results(300), h, path=MESSAGES)
    garbage = await st.post(b'{"model":"m","messages":[{"role":"user"', h, path=MESSAGES)
    prefix = b'{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"'
    suffix = b'"}]}'
    over = prefix + b"x" * (LIMIT_BYTES + 1 - len(prefix) - len(suffix)) + suffix
    too_big = await st.post(over, h, path=MESSAGES, timeout_s=60)
    return [
        Row(
            "/v1/messages: tool_result content nested 300 levels",
            "400 from the picker (no traceback, no 500, no engine)",
            f"{nested.status} {nested.body[:80]!r}",
            from_picker(nested, 400),
            BODY_PARSING,
        ),
        Row(
            "/v1/messages: body cut mid-JSON",
            "400 from the picker",
            f"{garbage.status} {garbage.body[:80]!r}",
            from_picker(garbage, 400),
            BODY_PARSING,
        ),
        Row(
            f"/v1/messages: body one byte over the picker's {LIMIT_BYTES >> 20} MiB limit",
            "413 from the picker before the engine sees it",
            f"{too_big.status} {too_big.body[:80]!r}",
            too_big.status == 413,
            BODY_SIZE,
        ),
    ]


async def agent_api_long_quiet(st: ChaosStack, quick: bool) -> list[Row]:
    """A ~100k-token prompt as Anthropic Messages and as Responses: the engine is quiet for ~9 s
    before the first token (the Responses stream's opening events go out at once, then silence)."""
    idle = st.settings.stream_idle_timeout_s
    tag = time.monotonic_ns()
    t0 = time.monotonic()
    claude = await st.post(
        messages(f"lq-{tag}", 80, filler=200, max_tokens=8),
        ANTHROPIC_HEADERS,
        path=MESSAGES,
        timeout_s=idle * 2,
    )
    ttft = claude.first_byte_s or 0.0
    long_input = responses(f"lqr-{tag}", 80, filler=200, max_tokens=8)
    resp_ok, resp_first, resp_note = await _responses_first_delta(st, long_input, idle)
    return [
        Row(
            "/v1/messages long prefill (~100k tokens, quiet before message_start)",
            f"200 and message_stop; first byte later than {QUIET_PAST_S:g} s",
            f"{claude.status} {'message_stop' if b'event: message_stop' in claude.body else claude.error}, "
            f"first byte {ttft:.2f} s, {claude.elapsed_s:.2f} s",
            completed(claude, b"event: message_stop") and ttft > QUIET_PAST_S,
            PICKER_PINGS,
        ),
        Row(
            "/v1/responses long prefill (~100k tokens, quiet between response.in_progress and the first delta)",
            f"200 and response.completed; first delta later than {QUIET_PAST_S:g} s",
            f"{resp_note}, first delta {resp_first:.2f} s, {time.monotonic() - t0:.1f} s for both",
            resp_ok and resp_first > QUIET_PAST_S,
            PICKER_PINGS,
        ),
    ]


async def _responses_first_delta(
    st: ChaosStack, body: dict[str, Any], idle_s: float
) -> tuple[bool, float, str]:
    """Stream a Responses request; ``(completed, seconds to the first text delta, note)``."""
    assert st.session is not None
    t0 = time.monotonic()
    first = 0.0
    seen = b""
    try:
        async with asyncio.timeout(idle_s * 2):
            async with st.session.post(st.url + RESPONSES, data=json.dumps(body).encode(),
                                       headers={"content-type": "application/json"}) as r:  # fmt: skip
                async for chunk in r.content.iter_any():
                    if not first and b"response.output_text.delta" in chunk:
                        first = time.monotonic() - t0
                    seen = (seen + chunk)[-4096:]
                ok = r.status == 200 and b"event: response.completed" in seen
                return ok, first, f"{r.status}"
    except TimeoutError:
        return False, first, "stuck (client timeout)"
    except (aiohttp.ClientError, ConnectionError) as exc:
        return False, first, type(exc).__name__


FAULTS = (messages_headers, messages_bodies, agent_api_long_quiet)

GUARDS: tuple[Guard, ...] = (
    Guard(
        BODY_SIZE,
        "the picker answers a body over --max-body-bytes with 413 as it arrives (servicer._absorb)",
        ("messages_bodies",),
        picker_flags=(f"--max-body-bytes={1 << 30}",),
    ),
)

# Registered guards that rows here check, and the faults that check them.
_CHECKED: tuple[tuple[str, tuple[str, ...]], ...] = (
    (SCRUB, ("messages_headers",)),
    (BODY_PARSING, ("messages_bodies",)),
    (PICKER_PINGS, ("agent_api_long_quiet",)),
)


def with_these_rows(guards: Sequence[Guard]) -> tuple[Guard, ...]:
    """``guards`` with this module's faults added to the guards its rows name."""
    checked = dict(_CHECKED)
    return tuple(replace(g, faults=(*g.faults, *checked.get(g.name, ()))) for g in guards)


__all__ = ["FAULTS", "GUARDS", "messages", "responses", "with_these_rows"]
