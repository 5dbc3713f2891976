"""Trace statistics on crafted traces with hand-computed expected numbers, and the CLI."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from smetric.trace.cli import main
from smetric.trace.formats import load_trace
from smetric.trace.reuse import ideal_reuse
from smetric.trace.stats import compute_stats, stats_to_json


def ag(sid: str, turn: int, t: float, inp: int, first: int, last: int, **kw: Any) -> dict[str, Any]:
    return {
        "sid": sid,
        "parent_sid": kw.get("parent"),
        "turn": turn,
        "t": t,
        "inp": inp,
        "out": 10,
        "trigger": kw.get("trigger", "agent"),
        "think_time": 1.0,
        "model": "m",
        "tool_tokens": kw.get("tool"),
        "system_tokens": 0,
        "hash_ranges": [[first, last]],
    }


# Family a: session a (3 turns) and sub-agent a::s (shares a's 2 system blocks); family b: 2 turns.
AGENTIC = [
    ag("a", 0, 0.0, 192, 1, 3, tool=128, trigger="first"),
    ag("a", 1, 10.0, 320, 1, 5),
    ag("a::s", 0, 12.0, 128, 1, 2, parent="a", tool=128, trigger="subagent_first"),
    ag("a", 2, 40.0, 414, 1, 6, trigger="user"),
    ag("b", 0, 0.0, 128, 100, 101, tool=0, trigger="first"),
    {**ag("b", 1, 500.0, 128, 100, 100), "hash_ranges": [[100, 100], [102, 102]]},
]


@pytest.fixture
def agentic_path(tmp_path: Path) -> Path:
    path = tmp_path / "agentic.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in AGENTIC) + "\n")
    return path


def test_reuse_numbers_by_hand(agentic_path: Path) -> None:
    stats = compute_stats(load_trace(agentic_path), instances=2)
    r = stats.reuse
    assert r is not None
    # reused: a1 3 blocks (192), a::s 2 blocks (128, first turn), a2 5 blocks (320), b1 1 block (64)
    assert r.ideal_reuse == pytest.approx(704 / 1310)
    assert r.intra_session_share == pytest.approx(576 / 704)  # a::s reuses a's blocks: inter
    assert r.inter_session_share == pytest.approx(128 / 704)
    assert r.intra_family_share == pytest.approx(1.0)
    assert r.system_prompt_share == pytest.approx(384 / 704)  # blocks 1-2 reused 3 times
    assert r.first_turn_reuse_share == pytest.approx(128 / 704)
    # per reused block: 10 s x3 (a1), 2 s x2 (a::s), 28 s x2 + 30 s x3 (a2), 500 s x1 (b1)
    assert (r.reuse_interval_p50_s, r.reuse_interval_p90_s) == (28.0, 30.0)
    assert r.reuse_within_100s_share == pytest.approx(10 / 11)
    assert (r.total_blocks, r.distinct_blocks) == (20, 9)
    assert "intra-family clock" in r.reuse_clock
    assert (stats.requests, stats.sessions, stats.families) == (6, 3, 2)
    assert stats.first_turn_share == pytest.approx(0.5)
    assert stats.first_turn_token_share == pytest.approx(448 / 1310)
    assert stats.top25_session_token_share == pytest.approx(956 / 1370)  # 1 of 3 sessions
    assert stats.trigger_mix == pytest.approx(
        {"first": 2 / 6, "agent": 2 / 6, "subagent_first": 1 / 6, "user": 1 / 6}
    )
    assert stats.think_time_p50_s_by_trigger == {"agent": 1.0, "user": 1.0}  # follow-ups only
    assert stats.prompt_tokens.max == 414 and stats.output_tokens.p50 == 10
    # no global clock: default assumption of 2 families over an hour, 3 requests per family
    assert stats.requests_per_s == pytest.approx(6 / 3600)
    assert stats.requests_per_min_per_instance == pytest.approx(6 / 3600 * 60 / 2)
    fast = compute_stats(load_trace(agentic_path), instances=2, family_rate_per_s=0.5)
    assert fast.requests_per_min_per_instance == pytest.approx(0.5 * 3 * 60 / 2)


def test_shared_system_prompt_turns_reuse_inter_session(tmp_path: Path) -> None:
    path = tmp_path / "agentic.jsonl"
    rows = [*AGENTIC, ag("c", 0, 0.0, 192, 200, 202, tool=128, trigger="first")]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    plain = compute_stats(load_trace(path)).reuse
    assert plain is not None and plain.ideal_reuse == pytest.approx(704 / 1502)
    shared = compute_stats(load_trace(path, share_system_prompt=True)).reuse
    assert shared is not None
    # c's two system blocks now carry a's shared ids: c0 reuses 128 tokens from session a
    assert shared.ideal_reuse == pytest.approx(832 / 1502)
    assert shared.intra_session_share == pytest.approx(576 / 832)
    assert shared.system_prompt_share == pytest.approx(512 / 832)
    assert shared.first_turn_reuse_share == pytest.approx(256 / 832)
    assert shared.intra_family_share == pytest.approx(704 / 832)
    # c0's cross-family reuse has no interval on per-family clocks; the rest are unchanged
    assert (plain.reuse_interval_p50_s, plain.reuse_interval_p90_s) == (28.0, 30.0)
    assert (shared.reuse_interval_p50_s, shared.reuse_interval_p90_s) == (28.0, 30.0)
    assert shared.reuse_within_100s_share == pytest.approx(10 / 11)


def test_reuse_interval_counts_from_recorded_completion(tmp_path: Path) -> None:
    path = tmp_path / "agentic.jsonl"
    rows = [
        {**ag("a", 0, 0.0, 128, 1, 2), "api_time": 4.0},
        {**ag("a::s", 0, 1.0, 128, 1, 2, parent="a"), "api_time": 30.0},  # overlaps a1: 0 s
        {**ag("a", 1, 10.0, 192, 1, 3), "api_time": 1.0},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    trace = load_trace(path)
    assert [r.recorded_latency_s for r in trace] == [4.0, 30.0, 1.0]
    reuse = ideal_reuse(trace)
    # a::s arrives at 1 s while a0 runs until 4 s -> 0 s; a1 at 10 s, blocks busy until 31 s -> 0 s
    assert sorted(zip(reuse.interval_s.tolist(), reuse.interval_blocks.tolist(), strict=True)) == [
        (0.0, 2),
        (0.0, 2),
    ]
    rows[1]["t"], rows[2]["t"] = 5.0, 40.0
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    reuse = ideal_reuse(load_trace(path))
    assert reuse.interval_s.tolist() == [1.0, 5.0] and reuse.interval_blocks.tolist() == [2, 2]
    stats = compute_stats(load_trace(path))
    assert stats.reuse is not None and "recorded completion" in stats.reuse.reuse_clock


def test_partial_last_block_and_recorded_clock(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]},
        {"timestamp": 1000, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]},
        {"timestamp": 2000, "input_length": 600, "output_length": 5, "hash_ids": [0, 7]},
    ]
    path = tmp_path / "m.jsonl.gz"
    path.write_bytes(gzip.compress("\n".join(json.dumps(r) for r in rows).encode()))
    trace = load_trace(path)
    reuse = ideal_reuse(trace)
    assert reuse.reused_tokens == 1100 + 512  # the partial last block counts its 76 tokens
    stats = compute_stats(trace, instances=3)
    assert stats.reuse is not None and stats.reuse.ideal_reuse == pytest.approx(1612 / 2800)
    assert stats.reuse.intra_session_share == pytest.approx(1.0)
    assert stats.requests_per_s == pytest.approx(1.5)  # 3 requests over a 2 s span
    assert stats.requests_per_min_per_instance == pytest.approx(30.0)
    assert stats.reuse.reuse_clock.startswith("recorded arrival times")


def test_no_hashes_gives_null_reuse(tmp_path: Path) -> None:
    path = tmp_path / "az.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.0,10,1\n2023-11-16 18:17:05.0,20,2\n"
    )
    stats = compute_stats(load_trace(path))
    assert stats.reuse is None
    data = stats_to_json(stats)
    assert (
        data["ideal_reuse"] is None
        and data["requests"] == 2
        and data["top25_session_token_share"] == pytest.approx(22 / 33)
    )
    with pytest.raises(ValueError, match="instances"):
        compute_stats(load_trace(path), instances=0)


def test_cli_table_and_json(agentic_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "stats.json"
    assert main(["stats", str(agentic_path), "--json", str(out), "--instances", "2"]) == 0
    printed = capsys.readouterr().out
    assert "ideal reuse" in printed and "53.7 %" in printed
    data = json.loads(out.read_text())
    for key in (
        "requests",
        "sessions",
        "ideal_reuse",
        "intra_session_share",
        "first_turn_share",
        "top25_session_token_share",
    ):
        assert key in data
    assert data["requests"] == 6 and data["ideal_reuse"] == pytest.approx(704 / 1310)
    assert main(["stats", str(agentic_path), "--max-context", "300", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["dropped_over_context"] == 2


def test_cli_errors_are_messages_not_tracebacks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"sid": "a", "turn": 0, "t": 0, "inp": 64, "out": 1, "hash_ranges": [[1, 1]]}\n{oops\n')
    assert main(["stats", str(bad)]) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err
    assert main(["stats", str(bad), "--skip-malformed"]) == 0
    assert main(["stats", str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot open" in capsys.readouterr().err
    assert main(["stats", str(bad), "--format", "mooncake"]) == 2
    assert main(["stats", str(bad), "--max-context", "0"]) == 2
    assert main(["stats"]) == 2  # usage error: argparse message, exit code, no traceback
    assert main(["stats", str(bad), "--format", "nope"]) == 2


def test_an_unwritable_json_is_one_line_before_the_trace_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import smetric.trace.cli as cli

    monkeypatch.setattr(cli, "load_trace", lambda *a, **k: pytest.fail("the trace was read"))
    assert main(["stats", str(tmp_path / "t.jsonl"), "--json", "/proc/x/y.json"]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == "smetric trace stats: error: --json /proc/x/y.json: cannot write there (No such file or directory)\n"
    )
