"""Tiny synthetic agentic traces for the simulator tests: each family is one session whose prompt
grows every turn, with chained block ids (so each turn extends the previous turn's prefix)."""

from __future__ import annotations

import numpy as np

from smetric.trace import Trace, TraceRequest


def synthetic(
    families: int = 6,
    turns: int = 5,
    base_tokens: int = 6_400,
    step_tokens: int = 1_280,
    out_tokens: int = 100,
    think_s: float = 5.0,
    huge_turn: int | None = None,
) -> Trace:
    """Each family = one session whose prompt grows by ``step_tokens`` per turn (chained ids)."""
    reqs: list[TraceRequest] = []
    for f in range(families):
        prev = -1
        for k in range(turns):
            prompt = base_tokens + k * step_tokens
            if huge_turn is not None and k == huge_turn:
                prompt = 300_000
            nb = prompt // 64
            first_id = f * 1_000_000
            r = TraceRequest(
                index=len(reqs),
                session_id=f"s{f}",
                family_id=f"s{f}",
                parent_session_id=None,
                turn=k,
                offset_s=k * 1.0,
                think_time_s=think_s if k else 0.0,
                prompt_tokens=prompt,
                output_tokens=out_tokens,
                hash_ranges=np.array([[first_id, first_id + nb - 1]], dtype=np.int64),
                prev_index=prev,
                est_hit_tokens=0 if k == 0 else min(reqs[-1].prompt_tokens + out_tokens, prompt),
            )
            prev = r.index
            reqs.append(r)
    return Trace(name="synthetic", block_tokens=64, requests=reqs)
