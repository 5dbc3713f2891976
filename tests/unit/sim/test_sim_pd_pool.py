"""The simulator's P/D pool runs selective P/D with the picker's rule: unset always hops, 0 never
hops (no KV crosses the network), a threshold keeps part of the traffic on the decode instances
(skipped when ../shared/traces is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from smetric.core.presets import get_preset
from smetric.sim.config import SimConfig
from smetric.sim.pd_pool import PdResult, main, simulate_pd
from smetric.sim.workload import PreparedWorkload, prepare
from smetric.trace.formats import load_trace

TRACE = Path(__file__).resolve().parents[3].parent / "shared" / "traces" / "claude-code-agentic.jsonl.gz"


@pytest.fixture(scope="module")
def work() -> PreparedWorkload:
    if not TRACE.exists():
        pytest.skip(f"shared trace {TRACE} not present")
    return prepare(load_trace(TRACE), get_preset(SimConfig().preset_name))


def _run(work: PreparedWorkload, non_cached: int | None) -> PdResult:
    cfg = SimConfig(warmup_s=300.0, measure_s=900.0, global_tier="none")
    return simulate_pd(work, "lmetric", 0.003, cfg, prefill=2, decode=2, non_cached_tokens=non_cached)


def test_the_decider_splits_the_traffic(work: PreparedWorkload) -> None:
    always, never, selective = _run(work, None), _run(work, 0), _run(work, 1024)
    assert always.requests > 20 and always.local_share == 0.0 and always.prefill_tokens_moved > 0
    assert never.local_share == 1.0 and never.prefill_tokens_moved == 0
    assert 0.0 < selective.local_share < 1.0
    assert selective.prefill_tokens_moved < always.prefill_tokens_moved


def test_the_cli_refuses_a_missing_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["/nonexistent/trace.jsonl"]) == 2
    assert "pd_pool:" in capsys.readouterr().err
