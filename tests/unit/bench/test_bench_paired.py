"""smetric.bench.paired: paired differences to any row of a bench JSON, from its per-seed values."""

from __future__ import annotations

import pytest

from smetric.bench import paired
from smetric.bench.sweep import paired_interval


def _row(label: str, rate: float, tps: dict[int, float]) -> dict[str, object]:
    per_seed = [{"seed": s, "status": "ok", "tps_within_slo": v} for s, v in tps.items()]
    return {"label": label, "rate": rate, "per_seed": per_seed}


def test_pairs_each_row_with_the_reference_by_seed() -> None:
    doc = {
        "results": [
            _row("smetric", 0.005, {0: 10.0, 1: 6.0, 2: 8.0}),
            _row("lmetric", 0.005, {0: 20.0, 1: 17.0, 2: 18.0}),
            _row("vllm-router", 0.005, {0: 12.0, 2: 11.0}),  # seed 1 failed: left out of the pairs
        ]
    }
    rows = {label: (mean, half, diffs) for _, label, mean, half, diffs in paired.paired_rows(doc, "lmetric")}
    assert set(rows) == {"smetric", "vllm-router"}
    mean, half, diffs = rows["smetric"]
    assert diffs == [-10.0, -11.0, -10.0] and mean == pytest.approx(-31 / 3)
    assert half == pytest.approx(4.303 * 0.57735 / 3**0.5, rel=1e-3)  # t(2) x sd / sqrt(3)
    assert rows["vllm-router"][2] == [-8.0, -7.0]


def test_interval_needs_two_pairs() -> None:
    assert paired_interval([3.0]) == (3.0, None)
    mean, half = paired_interval([])
    assert half is None and mean != mean  # NaN
    with pytest.raises(SystemExit, match="no row 'x'"):
        paired.paired_rows({"results": [_row("a", 1.0, {0: 1.0})]}, "x")
