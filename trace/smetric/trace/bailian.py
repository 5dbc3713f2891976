"""Loader for the Alibaba Bailian/Qwen usage-trace format (the paper's trace family).

``{"chat_id", "parent_chat_id" (-1 for a root), "timestamp" (s), "input_length", "output_length",
"type", "turn", "hash_ids"}`` per line, 16-token blocks. ``parent_chat_id`` names the previous
request of the same conversation, so sessions are recorded, not inferred: a session is a root
request and every request reachable from it through parent links (its id is the root's chat_id).
A request whose parent is not in the file (a sampled trace) starts its own session; those are
counted in the notes. Turns are re-derived as the depth below the root (root = 0), so they follow
this project's convention whatever base the file uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec

from smetric.trace.build import build_trace, chained_request, sort_by_timestamp
from smetric.trace.errors import BadLines, OnError
from smetric.trace.model import Trace, TraceRequest
from smetric.trace.prefix import shared_prefix_depth
from smetric.trace.reader import decode_hashed_lines

BLOCK_TOKENS = 16
NonNegInt = Annotated[int, msgspec.Meta(ge=0)]


class BailianLine(msgspec.Struct, frozen=True):
    chat_id: int
    parent_chat_id: int
    timestamp: Annotated[float, msgspec.Meta(ge=0)]
    input_length: NonNegInt
    output_length: NonNegInt
    hash_ids: list[int]
    type: str = ""
    turn: int = 0


def _decode(path: Path, bad: BadLines) -> list[BailianLine]:
    seen: set[int] = set()

    def unique(line: BailianLine) -> str | None:
        if line.chat_id in seen:
            return f"duplicate chat_id {line.chat_id}"
        seen.add(line.chat_id)
        return None

    return decode_hashed_lines(path, bad, BailianLine, "bailian", BLOCK_TOKENS, unique)


def load_bailian(
    path: Path | str,
    *,
    max_context_tokens: int | None = None,
    on_error: OnError = "raise",
) -> Trace:
    path = Path(path)
    bad = BadLines(path, on_error)
    lines = _decode(path, bad)
    notes: list[str] = []
    lines = sort_by_timestamp(lines, notes)
    depth = shared_prefix_depth([ln.hash_ids for ln in lines])
    t0 = lines[0].timestamp if lines else 0.0
    by_chat: dict[int, int] = {}
    session_start: dict[str, float] = {}
    orphans = 0
    requests: list[TraceRequest] = []
    for i, line in enumerate(lines):
        prev = by_chat.get(line.parent_chat_id, -1) if line.parent_chat_id != -1 else -1
        if line.parent_chat_id != -1 and prev < 0:
            orphans += 1
        requests.append(
            chained_request(
                requests, prev, f"chat{line.chat_id}", session_start,
                timestamp_s=line.timestamp, prompt_tokens=line.input_length,
                output_tokens=line.output_length, hash_ids=line.hash_ids, system_depth=depth,
            )
        )  # fmt: skip
        by_chat[line.chat_id] = i
    notes += [
        f"bailian: sessions from parent_chat_id links: {len(session_start)} sessions "
        f"({orphans} started by a request whose parent is not in the file); "
        f"{depth}-block shared system prefix detected; think times not recorded (0)",
        *bad.notes(),
    ]
    return build_trace(
        path,
        "bailian",
        requests,
        notes,
        max_context_tokens=max_context_tokens,
        skipped_malformed=bad.count,
        block_tokens=BLOCK_TOKENS,
        family_starts_s={s: v - t0 for s, v in session_start.items()},
    )
