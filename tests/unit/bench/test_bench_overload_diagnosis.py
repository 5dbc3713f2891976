"""The overload diagnosis' gate probe (docs/overload.md 8e): what a run's dispatched requests missed, their TTFT
against the gate's estimate, and the hit their snapshots credited beyond what the engines reused."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from smetric.bench.evidence.overload_diagnosis import GateProbe, gate_summary
from smetric.core.presets import get_preset
from smetric.sim.gateway import OverloadProbe
from smetric.sim.simulator import SimConfig, _Run, policy_params, simulate
from smetric.sim.workload import prepare
from tests.support.sim_synth import synthetic

P30 = get_preset("qwen3-30b-h20")
CFG = SimConfig(
    instances=2,
    warmup_s=0.0,
    measure_s=900.0,
    seed=3,
    arrivals="cold",
    global_tier="full",
    flow_control=json.dumps({"enabled": True}),
)


def _summary(framework_g: str) -> dict[str, float]:
    w = prepare(synthetic(families=6, turns=4, base_tokens=20_000, step_tokens=2_000, think_s=1.0), P30)
    cfg = replace(CFG, framework_g=framework_g)
    got: list[tuple[_Run, GateProbe]] = []

    def make(run: _Run) -> OverloadProbe:
        pr = GateProbe(policy_params(cfg, P30, w.block_tokens), cfg.instances, cfg.refresh_s, 0.0, 900.0, run)
        got.append((run, pr))
        return pr

    simulate(w, "lmetric", 0.5, cfg, probe=make)
    run, probe = got[0]
    assert probe.at_dispatch
    return gate_summary(run, probe, colocated=True)


@pytest.fixture(scope="module")
def summaries() -> dict[str, dict[str, float]]:
    return {g: _summary(g) for g in ("tier", "session")}


@pytest.mark.parametrize("framework_g", ["tier", "session"])
def test_the_outcome_shares_partition_the_dispatches(
    summaries: dict[str, dict[str, float]], framework_g: str
) -> None:
    s = summaries[framework_g]
    assert s["dispatched_ok"] + s["dispatched_missed_ttft"] + s[
        "dispatched_missed_tpot_only"
    ] == pytest.approx(1.0)
    assert s["ttft_over_estimate_p50"] > 0
    assert 0.0 <= s["missed_ttft_with_hit_share"] <= 1.0
    assert s["dispatched_missed_ttft"] == 0 or s["missed_ttft_waited_s_p50"] >= 0.0


def test_the_previous_turn_credits_what_the_engines_do_not_reuse(
    summaries: dict[str, dict[str, float]],
) -> None:
    # the one tier model holds what was routed: the snapshot's max(c, g) is what the engine then reuses; the
    # previous turn credits history the tier never got, and the gate's estimate falls short of the TTFT
    tier, session = summaries["tier"], summaries["session"]
    assert tier["credited_minus_reused_tokens_p90"] == 0.0
    assert session["credited_minus_reused_tokens_mean"] > 1_000
    assert session["ttft_over_estimate_p50"] > 1.5 * tier["ttft_over_estimate_p50"]
