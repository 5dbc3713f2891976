"""Shared last step of every loader: drop over-context requests and renumber what is left."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, TypeVar

from smetric.trace.model import Trace, TraceRequest, compress_hashes


def finalize(
    requests: list[TraceRequest],
    max_context_tokens: int | None,
    notes: list[str] | None = None,
    note_detail: str = "",
) -> tuple[list[TraceRequest], int]:
    """Drop requests whose prompt exceeds ``max_context_tokens``; return ``(kept, n_dropped)``.

    When something was dropped and ``notes`` is given, a note saying so (plus ``note_detail``) is
    appended to it.

    ``requests`` must be in file order with ``index`` equal to their position and ``prev_index``
    pointing at an earlier position (or -1). A dropped request's session continues: its successor
    keeps its recorded ``turn`` and ``est_hit_tokens`` (they describe the prompt, which still holds
    the dropped turn's history) and its ``prev_index`` points at the closest earlier *kept*
    request of the session (-1 if none). Kept requests are renumbered ``0..n-1`` in file order.
    """
    if max_context_tokens is not None and max_context_tokens <= 0:
        raise ValueError(f"max_context_tokens must be positive, got {max_context_tokens}")
    keep = [max_context_tokens is None or r.prompt_tokens <= max_context_tokens for r in requests]
    new_index = [-1] * len(requests)
    # nearest kept ancestor of each original position (itself if kept)
    kept_ancestor = [-1] * len(requests)
    out: list[TraceRequest] = []
    for i, r in enumerate(requests):
        if r.index != i or r.prev_index >= i:
            raise ValueError(f"request {i}: index {r.index} / prev_index {r.prev_index} out of order")
        prev_kept = kept_ancestor[r.prev_index] if r.prev_index >= 0 else -1
        if not keep[i]:
            kept_ancestor[i] = prev_kept
            continue
        new_index[i] = len(out)
        kept_ancestor[i] = i
        prev = new_index[prev_kept] if prev_kept >= 0 else -1
        if new_index[i] == i and prev == r.prev_index:
            out.append(r)
        else:
            out.append(dataclasses.replace(r, index=new_index[i], prev_index=prev))
    dropped = len(requests) - len(out)
    if dropped and notes is not None:
        notes.append(
            f"dropped {dropped} request(s) over max_context_tokens={max_context_tokens}{note_detail}"
        )
    return out, dropped


def build_trace(
    path: Path,
    fmt: str,
    requests: list[TraceRequest],
    notes: list[str],
    *,
    max_context_tokens: int | None,
    skipped_malformed: int,
    block_tokens: int,
    note_detail: str = "",
    family_starts_s: Mapping[str, float] | None = None,
    sessions_inferred: bool = False,
    has_sessions: bool = True,
    has_hashes: bool = True,
) -> Trace:
    """:func:`finalize`, then the :class:`Trace` a loader returns; recorded family starts are kept
    only for families that still have a request."""
    kept, dropped = finalize(requests, max_context_tokens, notes, note_detail)
    starts: dict[str, float] = {}
    if family_starts_s:
        kept_families = {r.family_id for r in kept}
        starts = {s: v for s, v in family_starts_s.items() if s in kept_families}
    return Trace(
        name=path.name,
        block_tokens=block_tokens,
        requests=kept,
        sessions_inferred=sessions_inferred,
        has_sessions=has_sessions,
        has_hashes=has_hashes,
        notes=notes,
        dropped_over_context=dropped,
        skipped_malformed=skipped_malformed,
        format=fmt,
        recorded_family_starts_s=starts,
    )


class Timestamped(Protocol):
    @property
    def timestamp(self) -> float: ...


StampedT = TypeVar("StampedT", bound=Timestamped)


def sort_by_timestamp(lines: list[StampedT], notes: list[str]) -> list[StampedT]:
    """``lines`` in timestamp order (stable); says so in ``notes`` when the file was not."""
    order = sorted(range(len(lines)), key=lambda i: lines[i].timestamp)
    if order == list(range(len(lines))):
        return lines
    notes.append("lines were not in timestamp order; sorted by timestamp (stable)")
    return [lines[i] for i in order]


def chained_request(
    requests: list[TraceRequest],
    prev: int,
    new_session_id: str,
    session_start_s: dict[str, float],
    *,
    timestamp_s: float,
    prompt_tokens: int,
    output_tokens: int,
    hash_ids: list[int],
    system_depth: int,
) -> TraceRequest:
    """The next request of a trace whose sessions are chains of (parent -> follow-up) requests
    with recorded timestamps and no think times (Bailian, Mooncake).

    ``prev`` is the index of the request this one follows (-1 starts session ``new_session_id``,
    whose start time is recorded in ``session_start_s``). Turn, ``est_hit_tokens`` (previous prompt
    + output, capped at this prompt) and the session come from ``prev``.
    """
    if prev >= 0:
        p = requests[prev]
        session, turn = p.session_id, p.turn + 1
        est_hit = min(p.prompt_tokens + p.output_tokens, prompt_tokens)
    else:
        session, turn, est_hit = new_session_id, 0, 0
        session_start_s[session] = timestamp_s
    return TraceRequest(
        index=len(requests),
        session_id=session,
        family_id=session,
        parent_session_id=None,
        turn=turn,
        offset_s=timestamp_s - session_start_s[session],
        think_time_s=0.0,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        hash_ranges=compress_hashes(hash_ids),
        trigger="first" if prev < 0 else "unknown",
        prev_index=prev,
        est_hit_tokens=est_hit,
        think_time_recorded=prev < 0,
        system_blocks=min(system_depth, len(hash_ids)) if prev < 0 else 0,
    )
