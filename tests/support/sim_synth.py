"""Tiny synthetic agentic traces for the simulator tests: each family is one session whose prompt
grows every turn, with chained block ids (so each turn extends the previous turn's prefix)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

from smetric.core.presets import get_preset
from smetric.sim.workload import PreparedWorkload, prepare
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


def write_agentic(path: Path, families: int = 4, turns: int = 4) -> None:
    lines = []
    for f in range(families):
        base = f * 10_000 + 1
        for k in range(turns):
            nb = 100 + 20 * k
            lines.append(
                {
                    "sid": f"fam{f}",
                    "parent_sid": None,
                    "turn": k,
                    "t": 10.0 * k,
                    "inp": nb * 64 + 10,
                    "out": 50,
                    "trigger": "first" if k == 0 else "agent",
                    "stop": "tool_use",
                    "model": "m",
                    "api_time": 1.0,
                    "think_time": 0.0 if k == 0 else 3.0,
                    "tool_tokens": 640 if k == 0 else None,
                    "system_tokens": 640 if k == 0 else None,
                    "hash_ranges": [[base, base + nb - 1]],
                }
            )
    with gzip.open(path, "wt") as fh:
        fh.write("\n".join(json.dumps(x) for x in lines) + "\n")


def work() -> PreparedWorkload:
    """The synthetic workload prepared for the 30B H20 preset."""
    return prepare(synthetic(), get_preset("qwen3-30b-h20"))


def agent_work() -> PreparedWorkload:
    """Twelve 6-turn sessions of 20k tokens growing 2k a turn, 1 s think time, for the 30B H20 preset:
    long enough prompts that a small pool queues and its global tier matters."""
    return prepare(
        synthetic(families=12, turns=6, base_tokens=20_000, step_tokens=2_000, think_s=1.0),
        get_preset("qwen3-30b-h20"),
    )


def comparable(d: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in d.items() if k not in ("sim_wall_s", "events_per_s", "policy")}
