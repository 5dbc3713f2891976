"""A synthetic agentic trace in the compact agentic format: a second workload for held-out evidence.

The project has one real agentic trace (``claude-code-agentic.jsonl.gz``). Every routing choice was
made on it, so a result that holds only there could be a property of those 560 families. This
generator writes a trace of the same format whose families come from a parametric model, so the
evidence can be re-run on a workload no choice was made on (docs/traces.md, "A synthetic second
trace"). Its parameters are set from the published facts of the real trace's README
(``../shared/traces/README.md``: trigger shares, median think times, median and p90 prompt, median
completion, requests and sub-agents per family) and from Claude Code's recorded first request (tool
and system prompt sizes); its shapes (log-normal sizes, append-only growth, compaction at a context
limit) are this module's, documented per field of :class:`SynthParams`. Nothing in it was chosen by
looking at a routing result.

Each family is one main session and, with probability ``subagent_p``, one sub-agent on its clock.
A session's prompt grows append-only: turn ``i`` resends turn ``i - 1``'s prompt and answer plus
new tokens (a tool result for an agent-triggered turn, a typed message for a user-triggered one);
past ``compact_at_tokens`` the session compacts (trigger ``other``): the prompt restarts from the
system prompt plus a summary. Block hashes are chained 64-token ids, unique across families; a
turn keeps its predecessor's full blocks and gets fresh ids for the rest, as in the real trace.
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

BLOCK_TOKENS = 64


@dataclass(frozen=True)
class LogNormal:
    """A log-normal size or time: ``median * exp(sigma * N(0, 1))``, clipped to ``[low, high]``."""

    median: float
    sigma: float
    low: float = 0.0
    high: float = math.inf

    def draw(self, rng: np.random.Generator) -> float:
        return float(
            min(max(self.median * math.exp(self.sigma * rng.standard_normal()), self.low), self.high)
        )


@dataclass(frozen=True)
class SynthParams:
    """The generator's model. Targets quoted from ``../shared/traces/README.md`` (the real trace)."""

    families: int = 600  # the real trace: 560 families
    # Claude Code's first request as recorded (trace_0001, turn 0): tool definitions + system prompt.
    tool_tokens: int = 12_974
    system_tokens: int = 4_243
    # Requests per session (the real trace: 38,510 requests over 595 sessions, 65 per session).
    turns: LogNormal = LogNormal(median=40, sigma=1.0, low=1, high=2_000)
    first_message_tokens: LogNormal = LogNormal(median=40_000, sigma=1.0, low=16, high=400_000)
    # Trigger shares (the real trace: 85 % agent, 13 % user, the rest `other`); compaction adds `other`.
    agent_share: float = 0.86
    # New tokens a turn appends: a tool result (agent) or a typed message (user).
    agent_new_tokens: LogNormal = LogNormal(median=500, sigma=1.4, low=8, high=120_000)
    user_new_tokens: LogNormal = LogNormal(median=200, sigma=1.2, low=4, high=20_000)
    # Completion tokens (the real trace: median 216).
    output_tokens: LogNormal = LogNormal(median=216, sigma=1.1, low=1, high=32_000)
    # Think time before a request (the real trace: agent median 9 s, user median 127 s).
    agent_think_s: LogNormal = LogNormal(median=9.0, sigma=0.9, low=0.5, high=600)
    user_think_s: LogNormal = LogNormal(median=127.0, sigma=1.0, low=5, high=3_600)
    # Compaction: past this prompt size the session restarts from system prompt + summary.
    compact_at_tokens: int = 320_000
    summary_tokens: LogNormal = LogNormal(median=12_000, sigma=0.5, low=1_000, high=60_000)
    # Sub-agents (the real trace: 35 sub-agent sessions over 560 families).
    subagent_p: float = 0.06
    subagent_turns: LogNormal = LogNormal(median=15, sigma=0.8, low=1, high=400)
    # The provider's answer time, which spaces a session's requests (recorded as `api_time`).
    api_base_s: float = 1.5
    api_prefill_tokens_per_s: float = 20_000.0
    api_decode_tokens_per_s: float = 70.0
    model: str = "synthetic-agent"


class _Ids:
    """Fresh block ids, unique across the whole trace."""

    def __init__(self) -> None:
        self.next = 1

    def take(self, n: int) -> tuple[int, int] | None:
        if n <= 0:
            return None
        first = self.next
        self.next += n
        return first, first + n - 1


def _extend(ranges: list[list[int]], new: tuple[int, int] | None) -> list[list[int]]:
    if new is None:
        return ranges
    if ranges and ranges[-1][1] + 1 == new[0]:
        return [*ranges[:-1], [ranges[-1][0], new[1]]]
    return [*ranges, [new[0], new[1]]]


def _truncate(ranges: list[list[int]], blocks: int) -> list[list[int]]:
    """The first ``blocks`` block ids of ``ranges``."""
    out: list[list[int]] = []
    left = blocks
    for first, last in ranges:
        if left <= 0:
            break
        take = min(last - first + 1, left)
        out.append([first, first + take - 1])
        left -= take
    return out


def _api_time_s(p: SynthParams, new_tokens: int, out: int) -> float:
    return p.api_base_s + new_tokens / p.api_prefill_tokens_per_s + out / p.api_decode_tokens_per_s


def _session(
    p: SynthParams,
    rng: np.random.Generator,
    ids: _Ids,
    sid: str,
    parent: str | None,
    start_s: float,
    turns: int,
) -> Iterator[dict[str, Any]]:
    sys_tokens = p.tool_tokens + p.system_tokens
    system = _extend([], ids.take(sys_tokens // BLOCK_TOKENS))  # this family's own system blocks
    t = start_s
    prompt = sys_tokens + round(p.first_message_tokens.draw(rng))
    ranges = _extend(system, ids.take(prompt // BLOCK_TOKENS - sys_tokens // BLOCK_TOKENS))
    trigger, think, new = ("first" if parent is None else "subagent_first"), 0.0, prompt
    prev_prompt, prev_out, prev_api = 0, 0, 0.0
    for turn in range(turns):
        if turn > 0:
            if prev_prompt + prev_out >= p.compact_at_tokens:  # compaction: restart from a summary
                trigger, think = "other", p.agent_think_s.draw(rng)
                prompt = sys_tokens + round(p.summary_tokens.draw(rng))
                ranges = _extend(system, ids.take(prompt // BLOCK_TOKENS - sys_tokens // BLOCK_TOKENS))
                new = prompt
            else:
                agent = rng.random() < p.agent_share
                trigger = "agent" if agent else "user"
                think = (p.agent_think_s if agent else p.user_think_s).draw(rng)
                new = round((p.agent_new_tokens if agent else p.user_new_tokens).draw(rng)) + prev_out
                prompt = prev_prompt + new
                kept = prev_prompt // BLOCK_TOKENS
                ranges = _extend(_truncate(ranges, kept), ids.take(prompt // BLOCK_TOKENS - kept))
            t += prev_api + think
        out = round(p.output_tokens.draw(rng))
        api = _api_time_s(p, new, out)
        first = turn == 0
        yield {
            "sid": sid,
            "parent_sid": parent,
            "turn": turn,
            "t": round(t, 3),
            "inp": prompt,
            "out": out,
            "trigger": trigger,
            "stop": "end_turn" if turn == turns - 1 else "tool_use",
            "model": p.model,
            "api_time": round(api, 3),
            "think_time": round(think, 3),
            "tool_tokens": p.tool_tokens if first else None,
            "system_tokens": p.system_tokens if first else None,
            "hash_ranges": ranges,
        }
        prev_prompt, prev_out, prev_api = prompt, out, api


def generate(params: SynthParams, seed: int) -> Iterator[dict[str, Any]]:
    """The trace's lines in session order (each family's main session, then its sub-agent)."""
    rng = np.random.default_rng(seed)
    ids = _Ids()
    for f in range(params.families):
        sid = f"synth_{f:05d}"
        turns = round(params.turns.draw(rng))
        main = list(_session(params, rng, ids, sid, None, 0.0, turns))
        yield from main
        if rng.random() < params.subagent_p:
            at = main[int(rng.integers(len(main)))]  # the sub-agent starts after one of the parent's turns
            start = float(at["t"]) + float(at["api_time"])
            sub_turns = round(params.subagent_turns.draw(rng))
            yield from _session(params, rng, ids, f"{sid}::agent1", sid, start, sub_turns)


def write(path: Path, params: SynthParams, seed: int) -> int:
    """Write the trace (gzip without a name or time in its header if ``path`` ends in ``.gz``, so one
    seed is one file's bytes); returns the number of requests."""
    lines = [orjson.dumps(line) for line in generate(params, seed)]
    data = b"\n".join(lines) + b"\n"
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
    return len(lines)
