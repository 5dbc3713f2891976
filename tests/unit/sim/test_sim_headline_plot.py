"""The simulator's headline figure (TPS within SLO against the offered load, a 95 % band over seeds)
and the quick preset's grid around the knee."""

from __future__ import annotations

from pathlib import Path

import pytest

from smetric.sim.cli import QUICK_POLICIES, QUICK_RATES
from smetric.sim.report import headline_path, mean_ci, plot_headline


def test_mean_ci_is_the_t_interval() -> None:
    mean, half = mean_ci([10.0, 12.0, 14.0])
    assert mean == 12.0 and half == pytest.approx(4.303 * 2.0 / 3**0.5, rel=1e-4)
    assert mean_ci([5.0]) == (5.0, 0.0)
    assert mean_ci([float("nan"), 3.0, 5.0])[0] == 4.0


def test_headline_figure_beside_the_plot(tmp_path: Path) -> None:
    out = headline_path(tmp_path / "quick.png")
    assert out == tmp_path / "quick-tps.png"
    rows = [
        {"policy": p, "seed": s, "rate_multiplier": r, "tps_within_slo": 100.0 * r + s + (p == "b")}
        for p in ("a", "b")
        for s in (0, 1, 2)
        for r in (1.0, 2.0)
    ]
    plot_headline(rows, "colocated", out, "test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quick_compares_the_strongest_policies_around_the_knee() -> None:
    rates = [float(r) for r in QUICK_RATES.split(",")]
    assert len(rates) >= 4 and rates == sorted(rates) and rates[-1] / rates[0] <= 4
    assert "smetric" in QUICK_POLICIES.split(",") and len(QUICK_POLICIES.split(",")) >= 3
