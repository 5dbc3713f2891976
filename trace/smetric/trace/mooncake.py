"""Loader for the Mooncake (FAST'25) trace format: no sessions recorded, so they are inferred.

``{"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]}`` per line, 512-token
blocks, the last (partial) block hashed too, hashes prefix-chained. Session inference: a request
whose leading blocks extend an earlier request's blocks *beyond the shared system prefix* (see
:func:`~smetric.trace.prefix.shared_prefix_depth`; block 0 in the public trace) continues that
earlier request's session; its predecessor is the most recent request holding the deepest shared
block. Each inferred session is its own family.
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

BLOCK_TOKENS = 512
NonNegInt = Annotated[int, msgspec.Meta(ge=0)]


class MooncakeLine(msgspec.Struct, frozen=True):
    timestamp: Annotated[float, msgspec.Meta(ge=0)]
    input_length: NonNegInt
    output_length: NonNegInt
    hash_ids: list[NonNegInt]


def _decode(path: Path, bad: BadLines) -> list[MooncakeLine]:
    return decode_hashed_lines(path, bad, MooncakeLine, "mooncake", BLOCK_TOKENS)


def load_mooncake(
    path: Path | str,
    *,
    max_context_tokens: int | None = None,
    system_blocks: int | None = None,
    on_error: OnError = "raise",
) -> Trace:
    """Load a Mooncake trace, inferring sessions by prefix extension.

    ``system_blocks`` overrides the detected shared system prefix depth (in blocks).
    """
    path = Path(path)
    bad = BadLines(path, on_error)
    lines = _decode(path, bad)
    notes: list[str] = []
    lines = sort_by_timestamp(lines, notes)
    depth = shared_prefix_depth([ln.hash_ids for ln in lines]) if system_blocks is None else system_blocks
    if depth < 0:
        raise ValueError(f"system_blocks must be >= 0, got {system_blocks}")
    t0_ms = lines[0].timestamp if lines else 0.0
    holder: dict[int, int] = {}  # block hash -> latest request index holding it
    session_start_s: dict[str, float] = {}
    requests: list[TraceRequest] = []
    for i, line in enumerate(lines):
        hashes = line.hash_ids
        shared = 0
        while shared < len(hashes) and hashes[shared] in holder:
            shared += 1
        prev = holder[hashes[shared - 1]] if shared > depth else -1
        requests.append(
            chained_request(
                requests, prev, f"mc{i:06d}", session_start_s,
                timestamp_s=line.timestamp / 1000.0, prompt_tokens=line.input_length,
                output_tokens=line.output_length, hash_ids=hashes, system_depth=depth,
            )
        )  # fmt: skip
        for h in hashes:
            holder[h] = i
    n_sessions = len(session_start_s)
    notes += [
        f"mooncake: sessions inferred by prefix extension beyond a {depth}-block shared system "
        f"prefix ({'detected' if system_blocks is None else 'given'}): {n_sessions} sessions, "
        f"{len(lines) - n_sessions} follow-up requests; each session is its own family",
        "mooncake: think times are not recorded (0); offsets come from the recorded timestamps",
        *bad.notes(),
    ]
    return build_trace(
        path,
        "mooncake",
        requests,
        notes,
        max_context_tokens=max_context_tokens,
        skipped_malformed=bad.count,
        block_tokens=BLOCK_TOKENS,
        family_starts_s={s: v - t0_ms / 1000.0 for s, v in session_start_s.items()},
        sessions_inferred=True,
    )
