"""The shared real traces load with the documented counts (skipped when ../shared/traces is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from smetric.trace.formats import load_trace
from smetric.trace.stats import compute_stats

TRACES = Path(__file__).resolve().parents[3].parent / "shared" / "traces"


def _path(name: str) -> Path:
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"shared trace {path} not present (CI provides ../shared/traces beside the checkout)")
    return path


def test_agentic_counts_and_reuse() -> None:
    trace = load_trace(_path("claude-code-agentic.jsonl.gz"))
    assert trace.format == "agentic" and len(trace) == 38_510
    assert len({r.session_id for r in trace}) == 595
    assert len({r.family_id for r in trace}) == 560
    for r in trace:
        if r.prev_index >= 0:
            assert trace.requests[r.prev_index].session_id == r.session_id
    stats = compute_stats(trace)
    assert stats.reuse is not None
    assert stats.reuse.ideal_reuse == pytest.approx(0.96, abs=0.01)  # README: ideal reuse ~96 %
    assert stats.trigger_mix["agent"] == pytest.approx(0.85, abs=0.01)  # README: 85 % agent-triggered


def test_agentic_drop_over_context() -> None:
    trace = load_trace(_path("claude-code-agentic.jsonl.gz"), max_context_tokens=200_000)
    assert trace.dropped_over_context > 0
    assert len(trace) + trace.dropped_over_context == 38_510
    assert max(r.prompt_tokens for r in trace) <= 200_000


def test_mooncake_counts() -> None:
    trace = load_trace(_path("mooncake-conversation.jsonl.gz"))
    assert trace.format == "mooncake" and len(trace) == 12_031 and trace.sessions_inferred
    follow_ups = sum(r.prev_index >= 0 for r in trace)
    assert 0.3 < follow_ups / len(trace) < 0.45  # README: about a third extend an earlier prompt


@pytest.mark.parametrize("name", ["azure-2023-code.csv", "azure-2023-conv.csv"])
def test_azure_loads(name: str) -> None:
    path = _path(name)
    trace = load_trace(path)
    rows = sum(1 for line in path.read_text().splitlines()[1:] if line.strip())
    assert len(trace) == rows and not trace.has_hashes
    assert 3000 < max(trace.recorded_family_starts_s.values()) <= 3600  # one hour
