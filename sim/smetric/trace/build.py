"""Shared last step of every loader: drop over-context requests and renumber what is left."""

from __future__ import annotations

import dataclasses

from smetric.trace.model import TraceRequest


def finalize(requests: list[TraceRequest], max_context_tokens: int | None) -> tuple[list[TraceRequest], int]:
    """Drop requests whose prompt exceeds ``max_context_tokens``; return ``(kept, n_dropped)``.

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
    return out, len(requests) - len(out)
