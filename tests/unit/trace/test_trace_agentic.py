"""Agentic-format loader: fields, session links, est_hit, system blocks, drops, bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from smetric.trace.agentic import load_agentic
from smetric.trace.errors import TraceFormatError


def line(
    sid: str, turn: int, t: float, inp: int, out: int, ranges: list[list[int]], **kw: Any
) -> dict[str, Any]:
    d: dict[str, Any] = {
        "sid": sid,
        "parent_sid": kw.pop("parent_sid", None),
        "turn": turn,
        "t": t,
        "inp": inp,
        "out": out,
        "trigger": kw.pop("trigger", "first" if turn == 0 else "agent"),
        "stop": "tool_use",
        "model": kw.pop("model", "m1"),
        "api_time": 1.0,
        "think_time": kw.pop("think_time", 0.0 if turn == 0 else 2.0),
        "tool_tokens": kw.pop("tool_tokens", None),
        "system_tokens": kw.pop("system_tokens", None),
        "hash_ranges": ranges,
    }
    d.update(kw)
    return d


def write(path: Path, rows: list[dict[str, Any]] | list[str], gz: bool = False) -> Path:
    text = "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n"
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


ROWS = [
    line("s1", 0, 0.0, 64 * 3 + 10, 50, [[1, 3]], tool_tokens=100, system_tokens=40),
    line("s1", 1, 5.0, 64 * 5, 20, [[1, 3], [10, 11]]),
    line(
        "s1::a",
        0,
        6.0,
        64 * 2,
        7,
        [[20, 21]],
        parent_sid="s1",
        trigger="subagent_first",
        tool_tokens=64,
        system_tokens=0,
    ),
    line("s1", 2, 30.0, 64 * 5 + 1, 3, [[1, 3], [10, 11]], trigger="user", think_time=20.0),
    line("s2", 0, 0.0, 64, 1, [[100, 100]], tool_tokens=0, system_tokens=0),
]


def test_fields_sessions_and_links(tmp_path: Path) -> None:
    trace = load_agentic(write(tmp_path / "a.jsonl.gz", ROWS, gz=True))
    assert trace.format == "agentic" and trace.block_tokens == 64 and len(trace) == 5
    r0, r1, sub, r3, s2 = trace.requests
    assert [r.index for r in trace] == [0, 1, 2, 3, 4]
    assert (r0.prev_index, r1.prev_index, sub.prev_index, r3.prev_index, s2.prev_index) == (-1, 0, -1, 1, -1)
    assert sub.family_id == "s1" and sub.parent_session_id == "s1" and sub.session_id == "s1::a"
    assert s2.family_id == "s2"
    # est_hit = previous prompt + its output, capped at this prompt
    assert r0.est_hit_tokens == 0
    assert r1.est_hit_tokens == min(64 * 3 + 10 + 50, 64 * 5)
    assert r3.est_hit_tokens == 64 * 5 + 1  # 320 + 20 = 340 capped at 321
    # system blocks: floor((tool+system)/64) on first requests only
    assert (r0.system_blocks, r1.system_blocks, sub.system_blocks, s2.system_blocks) == (2, 0, 1, 0)
    assert r1.hash_ranges.tolist() == [[1, 3], [10, 11]] and r1.n_blocks == 5
    assert r3.think_time_s == 20.0 and r3.trigger == "user" and r3.offset_s == 30.0
    assert r0.model == "m1"
    assert not trace.sessions_inferred and trace.has_sessions and trace.has_hashes
    assert trace.recorded_family_starts_s == {}


def test_missing_think_time_is_flagged(tmp_path: Path) -> None:
    rows = [ROWS[0], {**ROWS[1], "think_time": None}, ROWS[3]]
    trace = load_agentic(write(tmp_path / "a.jsonl", rows))
    assert [r.think_time_recorded for r in trace] == [True, False, True]
    assert trace.requests[1].think_time_s == 0.0
    assert any("1 follow-up request(s) have no think_time" in n for n in trace.notes)


def test_drop_over_context_keeps_session_going(tmp_path: Path) -> None:
    trace = load_agentic(write(tmp_path / "a.jsonl", ROWS), max_context_tokens=64 * 5)
    assert trace.dropped_over_context == 1 and len(trace) == 4
    assert [r.turn for r in trace if r.session_id == "s1"] == [0, 1]
    # dropping the middle request: successor links to the closest kept predecessor
    rows = [ROWS[0], line("s1", 1, 5.0, 64 * 9, 20, [[1, 3], [10, 15]]), ROWS[3]]
    trace = load_agentic(write(tmp_path / "b.jsonl", rows), max_context_tokens=64 * 6)
    assert trace.dropped_over_context == 1
    assert [(r.index, r.turn, r.prev_index) for r in trace] == [(0, 0, -1), (1, 2, 0)]
    assert trace.requests[1].est_hit_tokens == 64 * 5 + 1  # still from the recorded predecessor
    assert any("dropped 1" in n for n in trace.notes)


def test_share_system_prompt_maps_per_model(tmp_path: Path) -> None:
    rows = [
        line("a", 0, 0.0, 64 * 4, 1, [[1, 4]], tool_tokens=128, system_tokens=0),
        line("a", 1, 1.0, 64 * 5, 1, [[1, 5]]),
        line("b", 0, 0.0, 64 * 3, 1, [[50, 52]], tool_tokens=64, system_tokens=64),
        line("c", 0, 0.0, 64 * 3, 1, [[70, 72]], tool_tokens=64, system_tokens=0, model="m2"),
    ]
    trace = load_agentic(write(tmp_path / "a.jsonl", rows), share_system_prompt=True)
    a0, a1, b0, c0 = trace.requests
    base = 73  # above every id in the trace
    assert a0.hash_ranges.tolist() == [[base, base + 1], [3, 4]]
    assert a1.hash_ranges.tolist() == [[base, base + 1], [3, 5]]
    assert b0.hash_ranges.tolist() == [[base, base + 1], [52, 52]]
    assert c0.hash_ranges.tolist() == [[base + 2, base + 2], [71, 72]]  # second model's own sequence
    assert any("shared system prompt" in n for n in trace.notes)


def test_malformed_raises_with_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.jsonl", [json.dumps(ROWS[0]), "{not json", json.dumps(ROWS[1])])
    with pytest.raises(TraceFormatError, match=r"bad\.jsonl:2: invalid agentic record"):
        load_agentic(path)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (line("s", 0, 0.0, -5, 1, []), r"inp"),
        (line("s", 0, 0.0, 64, 1, [[3, 1]]), r"reversed"),
        (line("s", 0, 0.0, 64, 1, [[1, 2]]), r"exceed the prompt"),
        ({"sid": "s", "turn": 0}, r"missing required field"),
        (line("s", 0, 0.0, 64, 1, [[1]]), r"hash_ranges"),
    ],
)
def test_schema_and_semantic_errors(tmp_path: Path, bad: dict[str, Any], message: str) -> None:
    path = write(tmp_path / "bad.jsonl", [ROWS[0], bad])
    with pytest.raises(TraceFormatError, match=message) as info:
        load_agentic(path)
    assert info.value.line == 2


def test_skip_and_count(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.jsonl", [json.dumps(ROWS[0]), "[]", "", "{x", json.dumps(ROWS[1])])
    trace = load_agentic(path, on_error="skip")
    assert len(trace) == 2 and trace.skipped_malformed == 2
    assert trace.requests[1].prev_index == 0
    assert any("skipped 2 malformed" in n and "bad.jsonl:2" in n for n in trace.notes)


def test_missing_file_is_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="cannot open"):
        load_agentic(tmp_path / "nope.jsonl")


def test_block_token_counts(tmp_path: Path) -> None:
    trace = load_agentic(write(tmp_path / "a.jsonl", ROWS[:1]))
    assert np.array_equal(trace.requests[0].block_token_counts(64), [64, 64, 64])
