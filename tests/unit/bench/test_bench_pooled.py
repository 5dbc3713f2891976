"""smetric.bench.sweep.pooled: the main job's verdict over every load point, one pair per (load, seed)."""

from __future__ import annotations

import orjson
import pytest

from smetric.bench.rowreport import headline, rows_json
from smetric.bench.sweep import Row, pooled


def _row(label: str, rate: float, tps: dict[int, float]) -> Row:
    per_seed = tuple({"seed": s, "status": "ok", "tps_within_slo": v} for s, v in tps.items())
    paired = None if label == "smetric" else {"vs": "smetric", "seeds": sorted(tps), "mean": 0.0, "ci95": 1.0}
    summary = {"tps_within_slo": sum(tps.values()) / len(tps)}
    return Row(label, "picker", label, "ok", "", rate, "knee", tuple(tps), summary, per_seed, paired, 12)


ROWS = [
    _row("smetric", 0.1, {2: 10.0, 3: 20.0}),
    _row("lmetric", 0.1, {2: 11.0, 3: 18.0}),  # +10 %, -10 %
    _row("vllm-router", 0.1, {2: 8.0, 3: 15.0}),  # -20 %, -25 %
    _row("smetric", 0.2, {2: 40.0, 3: 30.0}),
    _row("lmetric", 0.2, {2: 44.0, 3: 27.0}),  # +10 %, -10 %
    _row("vllm-router", 0.2, {2: 30.0, 3: 24.0}),  # -25 %, -20 %
]


def test_pairs_every_load_and_seed_in_percent_of_the_reference() -> None:
    by = {p["label"]: p for p in pooled(ROWS)}
    assert set(by) == {"lmetric", "vllm-router"}
    lm, vr = by["lmetric"], by["vllm-router"]
    assert (lm["loads"], lm["pairs"], lm["skipped"], lm["vs"]) == (2, 4, 0, "smetric")
    assert lm["mean_pct"] == pytest.approx(0.0)
    assert vr["mean_pct"] == pytest.approx(-22.5)
    # t(3) = 3.182 x sd([-20, -25, -25, -20]) / sqrt(4): four pairs, not one degree of freedom per load
    assert vr["ci95_pct"] == pytest.approx(3.182 * 2.88675 / 2.0, rel=1e-3)


def test_a_reference_that_served_nothing_gives_no_ratio() -> None:
    rows = [*ROWS[:3], _row("smetric", 0.2, {2: 0.0, 3: 30.0}), *ROWS[4:]]
    vr = next(p for p in pooled(rows) if p["label"] == "vllm-router")
    assert (vr["pairs"], vr["skipped"]) == (3, 1)


def test_the_headline_and_the_json_carry_it() -> None:
    text = "\n".join(headline(ROWS))
    assert "over all 2 loads (4 paired runs, % of smetric's TPS in SLO):" in text
    assert "vllm-router -22.5 % [-27.1, -17.9] (worse)" in text
    assert "lmetric +0.0 %" in text and "(n.s.)" in text
    doc = orjson.loads(rows_json(ROWS, {}))
    assert [p["label"] for p in doc["pooled"]] == ["lmetric", "vllm-router"]


def test_one_load_point_adds_no_pooled_line() -> None:
    assert not any("over all" in line for line in headline(ROWS[:3]))


def test_a_front_end_with_fewer_pairs_says_its_own_count() -> None:
    # vllm-router's seed 3 failed at the second load: 3 pairs against LMetric's 4
    failed = _row("vllm-router", 0.2, {2: 30.0})
    text = "\n".join(headline([*ROWS[:5], failed]))
    assert "over all loads (% of smetric's TPS in SLO):" in text
    assert "(n.s.), 4 paired runs over 2 loads" in text
    assert ", 3 paired runs over 2 loads" in text
