"""Loader for the compact agentic format (``claude-code-agentic.jsonl.gz``, kv-cache-tester).

One JSON object per line, in session order. Each line is validated at the trust boundary with a
``msgspec`` struct (fast enough for the full 38,510-request trace in well under a second of
decoding); semantic checks that the schema cannot express follow in :func:`_check`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import numpy as np

from smetric.trace.build import build_trace
from smetric.trace.errors import BadLines, OnError
from smetric.trace.model import Trace, TraceRequest
from smetric.trace.reader import numbered_lines
from smetric.trace.sysprompt import share_system_prompt as _share_system_prompt

BLOCK_TOKENS = 64
NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
NonNegFloat = Annotated[float, msgspec.Meta(ge=0)]


class AgenticLine(msgspec.Struct, frozen=True):
    """Schema of one line; unknown fields (``api_time``, ``stop``, ...) are ignored."""

    sid: Annotated[str, msgspec.Meta(min_length=1)]
    turn: NonNegInt
    t: NonNegFloat
    inp: NonNegInt
    out: NonNegInt
    hash_ranges: list[tuple[NonNegInt, NonNegInt]]
    parent_sid: str | None = None
    trigger: str = "other"
    think_time: NonNegFloat | None = None
    tool_tokens: NonNegInt | None = None
    system_tokens: NonNegInt | None = None
    model: str = ""
    api_time: NonNegFloat | None = None


def _check(line: AgenticLine) -> str | None:
    """Why a schema-valid line is still wrong, or None."""
    n_blocks = 0
    for first, last in line.hash_ranges:
        if last < first:
            return f"hash range [{first}, {last}] is reversed"
        n_blocks += last - first + 1
    if n_blocks * BLOCK_TOKENS > line.inp:
        return f"{n_blocks} hashed {BLOCK_TOKENS}-token blocks exceed the prompt's {line.inp} tokens"
    return None


def load_agentic(
    path: Path | str,
    *,
    max_context_tokens: int | None = None,
    share_system_prompt: bool = False,
    on_error: OnError = "raise",
) -> Trace:
    """Load an agentic trace; see the module and :class:`~smetric.trace.model.TraceRequest` docs.

    ``family_id`` is the main session's sid (a sub-agent's ``parent_sid``); ``prev_index`` links a
    request to its session's previous line; ``est_hit_tokens`` is the previous request's prompt
    plus its output, capped at this prompt; ``system_blocks = (tool_tokens + system_tokens) // 64``
    on a session's first request.
    """
    path = Path(path)
    bad = BadLines(path, on_error)
    decoder = msgspec.json.Decoder(AgenticLine)
    requests: list[TraceRequest] = []
    last_of_session: dict[str, int] = {}
    missing_think = 0
    for number, raw in numbered_lines(path):
        try:
            line = decoder.decode(raw)
        except msgspec.MsgspecError as exc:
            bad.report(number, f"invalid agentic record: {exc}")
            continue
        problem = _check(line)
        if problem is not None:
            bad.report(number, problem)
            continue
        prev = last_of_session.get(line.sid, -1)
        first = prev < 0
        est_hit = 0
        if not first:
            p = requests[prev]
            est_hit = min(p.prompt_tokens + p.output_tokens, line.inp)
        sys_tokens = (line.tool_tokens or 0) + (line.system_tokens or 0)
        ranges = np.array(line.hash_ranges, dtype=np.int64).reshape(-1, 2)
        request = TraceRequest(
            index=len(requests),
            session_id=line.sid,
            family_id=line.parent_sid or line.sid,
            parent_session_id=line.parent_sid,
            turn=line.turn,
            offset_s=line.t,
            think_time_s=line.think_time or 0.0,
            prompt_tokens=line.inp,
            output_tokens=line.out,
            hash_ranges=ranges,
            trigger=line.trigger,
            prev_index=prev,
            est_hit_tokens=est_hit,
            system_blocks=min(sys_tokens // BLOCK_TOKENS, line.inp // BLOCK_TOKENS) if first else 0,
            model=line.model,
            recorded_latency_s=line.api_time,
            think_time_recorded=line.think_time is not None or first,
        )
        missing_think += line.think_time is None and not first
        last_of_session[line.sid] = request.index
        requests.append(request)
    notes = [
        "agentic: offsets are per session family (sub-agents on their parent's clock); "
        "there is no global arrival time, a replay picks family start times",
        *bad.notes(),
    ]
    if missing_think:
        notes.append(
            f"{missing_think} follow-up request(s) have no think_time (null): think_time_s = 0 and "
            "think_time_recorded = False for them"
        )
    if share_system_prompt:
        requests, note = _share_system_prompt(requests)
        notes.append(note)
    return build_trace(
        path,
        "agentic",
        requests,
        notes,
        max_context_tokens=max_context_tokens,
        skipped_malformed=bad.count,
        block_tokens=BLOCK_TOKENS,
        note_detail="; their sessions continue (successors link to the previous kept request)",
    )
