"""smetric.bench.evidence.knee: best baseline, knee and the step past it, paired by seed, drift at and past
the knee, and regimes merged from two sweeps."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from smetric.bench.evidence import knee


def _module() -> ModuleType:
    return knee


def _rows(policy: str, curve: dict[float, list[float]], drift: float = 0.0) -> list[dict[str, object]]:
    return [
        {
            "policy": policy,
            "seed": s,
            "rate_multiplier": rate,
            "tps_within_slo": v,
            "arrival_drift": drift,
            "arrival_drift_ok": abs(drift) <= 0.10,
        }
        for rate, values in curve.items()
        for s, v in enumerate(values)
    ]


def _doc(rows: list[dict[str, object]]) -> dict[str, object]:
    return {"config": {"mode": "colocated"}, "results": rows}


def test_compares_at_the_best_baselines_knee_and_one_step_past() -> None:
    ev = _module()
    rows = (
        _rows("smetric", {3: [100, 110, 105], 4: [130, 120, 125], 5: [90, 100, 95]})
        + _rows("lmetric", {3: [100, 100, 100], 4: [120, 120, 120], 5: [100, 100, 100]}, drift=0.2)
        + _rows("dynamo", {3: [90, 90, 90], 4: [110, 110, 110], 5: [50, 50, 50]})
    )
    e = ev.evidence("r", _doc(rows))
    assert e.best_baseline == "lmetric" and e.knee == 4 and e.past == 5
    assert e.at_knee.mean == pytest.approx(5.0)  # +10, 0, +5
    assert e.at_knee.pct_mean == pytest.approx(100 * (10 / 120 + 0 + 5 / 120) / 3)
    assert e.past_knee is not None and e.past_knee.mean == pytest.approx(-5.0)
    assert e.past_knee.verdict == "tie"
    assert e.peak.mean == pytest.approx(5.0)
    assert (e.drift_over, e.drift_runs) == (6, 12)  # lmetric's 6 runs at 4x and 5x
    assert "| r | lmetric | 4x |" in ev.markdown([e], "smetric")


def test_a_clear_loss_and_merged_sweeps(tmp_path: Path) -> None:
    ev = _module()
    a = _rows("smetric", {1: [50, 52, 51]}) + _rows("lmetric", {1: [60, 61, 62]})
    b = _rows("smetric", {2: [40, 41, 39]}) + _rows("lmetric", {2: [45, 44, 46]})
    (tmp_path / "a.json").write_text(json.dumps(_doc(a)))
    (tmp_path / "b.json").write_text(json.dumps(_doc(b)))
    doc = ev.load(f"{tmp_path / 'a.json'}+{tmp_path / 'b.json'}")
    e = ev.evidence("m", doc)
    assert e.knee == 1 and e.past == 2
    assert e.at_knee.verdict == "loss" and e.past_knee is not None and e.past_knee.verdict == "loss"
    with pytest.raises(SystemExit):
        ev.evidence("m", _doc(_rows("lmetric", {1: [1, 2, 3]})))  # no smetric rows
