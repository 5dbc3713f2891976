"""Steady agents in the simulator (closed population, family chaining, the global tier's steady
state) and engine refusals counted as drops instead of aborting the run."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from smetric.core.presets import get_preset
from smetric.sim.simulator import SimConfig, simulate
from smetric.sim.workload import PreparedWorkload, prepare
from tests.support.sim_synth import synthetic

P30 = get_preset("qwen3-30b-h20")
CFG = SimConfig(instances=4, warmup_s=200.0, measure_s=600.0, seed=3)  # arrivals="agents"


def work(**kw: int | float | None) -> PreparedWorkload:
    return prepare(synthetic(**kw), P30)  # type: ignore[arg-type]


def family_spans(w: PreparedWorkload, records: tuple) -> dict[int, tuple[float, float]]:  # type: ignore[type-arg]
    """(first send, last finish) of every family instance (clone, family) that sent something."""
    spans: dict[int, tuple[float, float]] = {}
    for r in records:
        clone, i = divmod(r.key, len(w))
        fk = clone * w.n_families + w.family_index[i]
        lo, hi = spans.get(fk, (np.inf, -np.inf))
        spans[fk] = (min(lo, r.send_s), max(hi, r.finish_s))
    return spans


def test_agents_are_a_closed_population_working_family_after_family() -> None:
    w = work(families=6, turns=4, think_s=3.0)
    rate = 0.2
    res = simulate(w, "lmetric", rate, CFG, keep_records=True)
    n = res.metrics["agents"]
    assert n == round(rate * w.mean_family_duration_s) == 1  # 0.2 x 3 s
    spans = sorted(family_spans(w, res.records).values())
    assert len(spans) > 10  # the agent moved on family after family
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end - 1e-9  # one agent: a family starts only after the previous ended
    many = simulate(w, "lmetric", 2.0, CFG, keep_records=True)
    assert many.metrics["agents"] == 6
    events = sorted(e for lo, hi in family_spans(w, many.records).values() for e in ((lo, 1), (hi, -1)))
    assert max(np.cumsum([d for _, d in events])) <= 6  # never more families at once than agents


def test_every_run_reports_its_drift_and_whether_it_is_within_the_bound() -> None:
    m = simulate(work(), "lmetric", 1.0, CFG).metrics
    assert m["arrival_drift_ok"] == (abs(m["arrival_drift"]) <= 0.10)
    assert m["arrival_rate_start_per_s"] > 0 and m["arrival_rate_end_per_s"] > 0


def test_joined_sessions_find_their_earlier_turns_in_the_global_tier() -> None:
    """Agents join inside families: the KV of the turns before they joined is in the (full) global
    tier, as in steady state; with the prewarm off their first requests start uncached."""
    w = work(families=6, turns=30, think_s=20.0)
    cfg = dataclasses.replace(CFG, global_tier="full", warmup_s=0.0, measure_s=300.0, agent_entry_s=0.0)

    def first_global_hits(c: SimConfig) -> int:
        recs = simulate(w, "lmetric", 0.5, c, keep_records=True).records
        seen: set[int] = set()
        total = 0
        for r in sorted(recs, key=lambda r: r.send_s):
            clone, i = divmod(r.key, len(w))
            fk = clone * w.n_families + w.family_index[i]
            if fk not in seen:
                seen.add(fk)
                total += r.global_hit_tokens
        return total

    assert first_global_hits(cfg) > 0
    assert first_global_hits(dataclasses.replace(cfg, prewarm_global_tier=False)) == 0


def test_a_request_the_engine_refuses_is_dropped_with_its_reason_and_the_run_goes_on() -> None:
    """A request that passed the drop filter but needs more KV blocks than an instance holds."""
    w = work(huge_turn=2)  # a 300k-token turn in every family: over one H20's pool
    assert w.n_dropped > 0
    unfiltered = dataclasses.replace(w, dropped=np.zeros_like(w.dropped))
    for mode in ("colocated", "disaggregated"):
        cfg = dataclasses.replace(CFG, mode=mode)
        m = simulate(unfiltered, "lmetric", 1.0, cfg).metrics
        assert m["requests_engine_rejected"] > 0
        assert m["requests_dropped"] == m["requests_engine_rejected"]
        assert m["requests_engine_rejected_in_window"] <= m["requests_dropped_in_window"]
        assert m["requests_served_in_window"] > 0  # the sessions went on
