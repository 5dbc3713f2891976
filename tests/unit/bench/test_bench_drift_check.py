"""smetric.bench.evidence.drift_check: the Poisson floor of the arrival-drift bound and its table."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from types import ModuleType

import pytest

from smetric.bench.evidence import drift_check


def _module() -> ModuleType:
    return drift_check


def test_poisson_floor_follows_the_quarter_count() -> None:
    m = _module()
    # 200 requests a quarter: the drift's sd is sqrt(2/200) = 0.1, so |drift| > 0.1 about 32 %
    assert m.poisson_over(200) == pytest.approx(math.erfc(1 / math.sqrt(2)), rel=1e-9)
    assert m.poisson_over(200) == pytest.approx(0.3173, abs=1e-3)
    assert m.poisson_over(20_000) < 1e-6
    assert math.isnan(m.poisson_over(0))


def test_table_groups_runs_by_policy_and_rate(tmp_path: Path) -> None:
    m = _module()

    def run(seed: int, drift: float | None) -> dict[str, object]:
        return {
            "policy": "p",
            "seed": seed,
            "rate_multiplier": 1.0,
            "arrival_drift": drift,
            "arrival_rate_start_per_s": 1.0,
            "arrival_rate_end_per_s": 1.0 + (drift or 0.0),
        }

    doc = {"config": {"measure_s": 2400}, "results": [run(0, 0.2), run(1, -0.2), run(2, 0.0), run(3, None)]}
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(doc))
    lines = m.table(m.rows([path]))
    assert len(lines) == 3  # header, rule, one group (the run without a drift is left out)
    row = lines[2]
    assert "| sweep | p | 1x | 3 |" in row and "+0.0 %" in row and "2/3" in row


def test_a_gzipped_sidecar_reads_each_runs_own_window(tmp_path: Path) -> None:
    """The committed results are ``.runs.jsonl.gz`` sidecars: no config, so a quarter is the row's window / 4."""
    m = _module()
    rows = [
        {
            "policy": "p",
            "seed": s,
            "rate_multiplier": 2.0,
            "arrival_drift": d,
            "arrival_rate_start_per_s": 1.0,
            "arrival_rate_end_per_s": 1.0,
            "window_start_s": 1200.0,
            "window_end_s": 3600.0,
            "tps_within_slo": 1.0,
        }
        for s, d in ((10, 0.15), (11, -0.05))
    ]
    lines = [json.dumps({"format": "smetric-sim-runs/1", "fingerprint": "f"})]
    lines += [json.dumps({"key": ["", "p", r["seed"], 2.0], "row": r}) for r in rows]
    path = tmp_path / "cell.runs.jsonl.gz"
    path.write_bytes(gzip.compress("\n".join(lines).encode()))
    got = m.rows([path])
    assert [r["_quarter_s"] for r in got] == [600.0, 600.0] and {r["_file"] for r in got} == {"cell"}
    row = m.table(got)[2]
    assert "| cell | p | 2x | 2 |" in row and "1/2" in row and "| 600 |" in row


def test_the_summary_says_whether_the_drift_follows_the_seed_or_the_policy() -> None:
    """Two policies on three seeds: the drift follows the seed (sd across policies ~0, across seeds large)."""
    m = _module()
    seed_drift = {10: 0.12, 11: -0.04, 12: 0.02}
    got = [
        {
            "_file": "f",
            "policy": p,
            "seed": s,
            "rate_multiplier": 8.0,
            "arrival_drift": d + (0.01 if p == "b" else 0.0),
        }
        for p in ("a", "b")
        for s, d in seed_drift.items()
    ]
    across_policies, n_seeds, across_seeds, n_policies = m.spread(got)
    assert (n_seeds, n_policies) == (3, 2)
    assert across_policies == pytest.approx(0.01 / math.sqrt(2))
    assert across_seeds == pytest.approx(
        math.sqrt(((0.12 - 1 / 30) ** 2 + (-0.04 - 1 / 30) ** 2 + (0.02 - 1 / 30) ** 2) / 2)
    )
    lines = m.summary(got)
    assert lines[0] == "runs over the 10 % bound: 2 of 6; largest |drift| 13.0 %"
    assert (
        "across policies on one seed 0.7 pp (3 groups), across seeds for one policy 8.1 pp (2 groups)"
        in lines[1]
    )
    assert m.summary([{**got[0], "arrival_drift": None}]) == []
