"""``smetric trace synth``: the synthetic agentic trace (the held-out second workload, docs/traces.md)
loads with the real trace's loader, is the same bytes for the same seed, chains its block ids as the
real trace does, and lands near the real trace's published facts that set its parameters."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from smetric.trace import load_trace
from smetric.trace.cli import main
from smetric.trace.synth import BLOCK_TOKENS, SynthParams, generate, write

SMALL = replace(SynthParams(), families=60)


def _blocks(ranges: list[list[int]]) -> list[int]:
    return [b for first, last in ranges for b in range(first, last + 1)]


def test_same_seed_same_bytes_other_seed_other_trace(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz", tmp_path / "c.jsonl.gz"
    write(a, SMALL, 1)
    write(b, SMALL, 1)
    write(c, SMALL, 2)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_loads_as_an_agentic_trace_with_sub_agents_on_their_parents_clock(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    n = write(path, SMALL, 2)
    trace = load_trace(path)
    assert trace.format == "agentic" and len(trace.requests) == n
    assert len({r.family_id for r in trace.requests}) == 60
    subs = [r for r in trace.requests if r.parent_session_id is not None]
    assert subs, "some family has a sub-agent at this size and seed"
    first_sub = next(r for r in subs if r.turn == 0)
    parent = [r for r in trace.requests if r.session_id == first_sub.parent_session_id]
    assert parent[0].offset_s <= first_sub.offset_s <= parent[-1].offset_s + 3_600
    # every session's first request carries the system prompt sizes the shared-prompt option reads
    assert all(r.system_blocks == (12_974 + 4_243) // BLOCK_TOKENS for r in trace.requests if r.turn == 0)


def test_a_follow_up_keeps_its_predecessors_full_blocks_and_compaction_restarts_after_the_system_prompt() -> (
    None
):
    lines = list(generate(SMALL, 3))
    sys_blocks = (SMALL.tool_tokens + SMALL.system_tokens) // BLOCK_TOKENS
    seen: set[int] = set()
    compactions = 0
    prev: dict[str, dict[str, object]] = {}
    for line in lines:
        blocks = _blocks(line["hash_ranges"])
        assert len(blocks) == line["inp"] // BLOCK_TOKENS
        before = prev.get(str(line["sid"]))
        if before is None:
            assert not seen.intersection(blocks), "a new session's blocks are fresh ids"
        else:
            old = _blocks(before["hash_ranges"])  # type: ignore[arg-type]
            assert line["t"] > before["t"]
            if line["trigger"] == "other":
                compactions += 1
                assert blocks[:sys_blocks] == old[:sys_blocks]
                assert not seen.intersection(blocks[sys_blocks:])
            else:
                assert line["inp"] > before["inp"] + before["out"]  # type: ignore[operator]
                assert blocks[: len(old)] == old
                assert not seen.intersection(blocks[len(old) :])
        seen.update(blocks)
        prev[str(line["sid"])] = line
    assert compactions > 0


def test_the_generated_trace_lands_near_the_facts_that_set_its_parameters() -> None:
    lines = list(generate(replace(SynthParams(), families=200), 1))
    prompts = np.array([x["inp"] for x in lines])
    outputs = np.array([x["out"] for x in lines])
    triggers = [x["trigger"] for x in lines]
    agent_think = np.median([x["think_time"] for x in lines if x["trigger"] == "agent"])
    user_think = np.median([x["think_time"] for x in lines if x["trigger"] == "user"])
    # ../shared/traces/README.md: median prompt ~104k, p90 ~234k, median completion ~216,
    # 85 % agent- and 13 % user-triggered, median think 9 s (agent) and 127 s (user)
    assert 80_000 < np.median(prompts) < 140_000
    assert 180_000 < np.percentile(prompts, 90) < 320_000
    assert 180 < np.median(outputs) < 260
    assert triggers.count("agent") / len(lines) == pytest.approx(0.85, abs=0.03)
    assert triggers.count("user") / len(lines) == pytest.approx(0.13, abs=0.03)
    assert agent_think == pytest.approx(9.0, rel=0.15) and user_think == pytest.approx(127.0, rel=0.15)


def test_cli_writes_and_refuses_an_unwritable_path_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.jsonl.gz"
    assert main(["synth", str(out), "--families", "4", "--seed", "5"]) == 0
    assert f"{out}: " in capsys.readouterr().out
    assert main(["validate", str(out)]) == 0
    assert main(["synth", str(tmp_path / "missing" / "t.jsonl"), "--families", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("smetric trace synth: cannot write") and "\n" not in err
    assert main(["synth", str(out), "--families", "0"]) == 2
