"""The bench's knee search, the per-seed aggregation and the sim-vs-bench rank correlation."""

from __future__ import annotations

import math

import pytest

from smetric.bench.compare import average_ranks, kendall_tau_b, sim_scores, spearman
from smetric.bench.report import PolicyResult
from smetric.bench.sweep import (
    Cell,
    KneeSearch,
    aggregate,
    best_attainment,
    best_mean_attainment,
    rows_of,
    rung,
)
from tests.support.bench_results import result


def walk(search: KneeSearch, attainment_at: dict[float, float]) -> dict[float, float]:
    probed: dict[float, float] = {}
    while (rate := search.next_rate(probed)) is not None:
        probed[rate] = attainment_at[rate]
    return probed


def test_knee_search_walks_up_until_the_best_row_misses() -> None:
    s = KneeSearch(1.0, factor=2.0)
    probed = walk(s, {1.0: 0.99, 2.0: 0.95, 4.0: 0.7})
    assert list(probed) == [1.0, 2.0, 4.0]
    assert s.knee(probed) == 4.0


def test_knee_search_walks_down_when_it_starts_past_the_knee() -> None:
    s = KneeSearch(4.0, factor=2.0)
    probed = walk(s, {4.0: 0.5, 2.0: 0.8, 1.0: 0.93})
    assert list(probed) == [4.0, 2.0, 1.0]
    assert s.knee(probed) == 2.0


def test_knee_search_is_bounded_and_says_when_no_knee_was_found() -> None:
    s = KneeSearch(1.0, factor=2.0, max_probes=3)
    probed = walk(s, {1.0: 1.0, 2.0: 1.0, 4.0: 1.0})
    assert len(probed) == 3 and s.knee(probed) is None
    # a failed rung (NaN: no row ran) counts as a miss, never as a pass
    assert KneeSearch(1.0, 2.0).next_rate({1.0: math.nan}) == 0.5
    with pytest.raises(ValueError):
        KneeSearch(1.0, factor=1.0)


def test_ladder_rates_compare_equal() -> None:
    s = KneeSearch(1.0)
    assert s.step(s.step(1.0, 1), 1) == rung(2.0)
    assert s.step(s.step(1.0, 1), -1) == 1.0


def test_aggregate_mean_spread_and_counts() -> None:
    cells = [Cell(1.0, 0, result("a", 10.0, 0.9)), Cell(1.0, 1, result("a", 14.0, 0.7)),
             Cell(1.0, 0, result("b", 5.0, 0.95))]  # fmt: skip
    row = aggregate(cells, 1.0, "a", "knee")
    assert row.seeds == (0, 1) and row.status == "ok"
    assert row.mean("tps_within_slo") == pytest.approx(12.0)
    assert row.spread("tps_within_slo") == pytest.approx(math.sqrt(8.0))  # sample std of 10, 14
    assert row.mean("n_sent") == 20  # counts are summed
    assert row.per_seed[1]["tps_within_slo"] == 14.0
    assert math.isnan(aggregate(cells, 1.0, "b", "knee").spread("tps_within_slo"))  # one seed
    rows = rows_of(cells, ["a", "b"], knee=1.0, past=None)
    assert [r.point for r in rows] == ["knee", "knee"]
    assert rows[0].paired is None and rows[1].paired == {"vs": "a", "seeds": [0], "mean": -5.0, "ci95": None}
    assert best_mean_attainment(rows, 1.0) == ("b", 0.95)
    assert best_attainment([c.result for c in cells]) == 0.95


def test_a_failed_seed_is_reported_not_averaged() -> None:
    failed = PolicyResult("a", "envoy+smetric-epp", "a", "failed", "Envoy died")
    cells = [Cell(2.0, 0, result("a", 10.0, 0.9)), Cell(2.0, 1, failed)]
    row = aggregate(cells, 2.0, "a", "past knee")
    assert row.status == "partial" and "seed 1: Envoy died" in row.note
    assert row.seeds == (0,) and row.mean("tps_within_slo") == 10.0
    only_failed = aggregate([Cell(2.0, 1, failed)], 2.0, "a", "past knee")
    assert only_failed.summary is None and only_failed.status == "failed"


def test_rank_correlations() -> None:
    assert list(average_ranks([3.0, 1.0, 2.0, 2.0])) == [1.0, 4.0, 2.5, 2.5]
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert kendall_tau_b([1, 2, 3], [1, 3, 2]) == pytest.approx(1 / 3)
    assert math.isnan(spearman([1.0], [1.0]))


def test_sim_scores_rank_by_peak_and_report_the_knee() -> None:
    rows = [
        {"policy": p, "rate_multiplier": m, "seed": s, "tps_within_slo": tps + s, "slo_attainment": att}
        for p, m, tps, att in [
            ("a", 2, 100, 0.99),
            ("b", 2, 90, 0.95),
            ("a", 4, 150, 0.85),
            ("b", 4, 170, 0.88),
            ("a", 8, 120, 0.5),
            ("b", 8, 100, 0.4),
        ]
        for s in (0, 1)
    ]
    rows.append({"policy": "a", "rate_multiplier": 8, "tps_within_slo": None, "slo_attainment": None})
    knee, scores = sim_scores(rows, ["a", "b"])
    assert knee == 4 and scores == {"a": 150.5, "b": 170.5}


def test_markdown_rows_have_as_many_cells_as_the_header() -> None:
    from smetric.bench.rowreport import rows_markdown

    cells = [Cell(1.0, k, result(lab, 10.0 + k, 0.9)) for k in range(2) for lab in ("a", "b")]
    failed = PolicyResult("c", "vllm-router", "c", "failed", "no binary")
    lines = rows_markdown(
        [*rows_of(cells, ["a", "b"], 1.0, None), aggregate([Cell(1.0, 0, failed)], 1.0, "c", "knee")]
    )
    counts = {line.count("|") for line in lines.splitlines()}
    assert len(counts) == 1, lines
