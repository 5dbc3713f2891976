"""The side-by-side report's arithmetic: added latency vs the backend path, ratios, spreads."""

from __future__ import annotations

import pytest

from smetric.bench.latency import side_by_side as side


def times(ms: float, n: int = 20) -> list[float]:
    return [ms / 1000] * n


def test_added_latency_ratios_and_cpu_per_1000() -> None:
    row = side.summarise(
        128 * 1024,
        {"backend": times(1.0), "envoy+picker": times(4.0), "vllm-router": times(7.0)},
        {"envoy+picker": 0.5, "vllm-router": 1.0},
        20,
    )
    assert row["envoy+picker"]["added_p50_ms"] == pytest.approx(3.0)
    assert row["vllm-router"]["added_p99_ms"] == pytest.approx(6.0)
    assert row["ratio_added_p50"] == pytest.approx(0.5) and row["ratio_added_p99"] == pytest.approx(0.5)
    assert row["envoy+picker"]["cpu_s_per_1000"] == pytest.approx(25.0)
    assert row["ratio_cpu"] == pytest.approx(0.5)


def test_no_ratio_when_the_peer_adds_nothing_or_is_missing() -> None:
    row = side.summarise(8192, {"backend": times(1.0), "envoy+picker": times(2.0), "vllm-router": times(1.0)},
                         {"envoy+picker": 0.1, "vllm-router": 0.1}, 20)  # fmt: skip
    assert row["ratio_added_p50"] is None
    alone = side.summarise(
        8192, {"backend": times(1.0), "envoy+picker": times(2.0)}, {"envoy+picker": 0.1}, 20
    )
    assert "ratio_added_p50" not in alone


def test_aggregate_spreads_over_runs() -> None:
    def run(added: float) -> dict[str, object]:
        rows = [
            side.summarise(
                size, {"backend": times(1.0), "envoy+picker": times(1.0 + added)}, {"envoy+picker": 0.1}, 20
            )
            for size in side.SIZES
        ]
        return {"sizes": rows}

    agg = side.aggregate([run(a) for a in (2.0, 3.0, 5.0)])
    assert len(agg) == len(side.SIZES)
    assert agg[1]["envoy+picker added_p50_ms"] == {"min": 2.0, "median": 3.0, "max": 5.0}


def test_no_cpu_ratio_when_the_peer_read_zero_ticks() -> None:
    row = side.summarise(
        8192,
        {"backend": times(1.0), "envoy+picker": times(2.0), "vllm-router": times(3.0)},
        {"envoy+picker": 0.01, "vllm-router": 0.0},
        20,
        {"envoy+picker": 0.01, "vllm-router": 0.0},
    )
    assert "ratio_cpu" not in row and "ratio_busy_cpu" not in row
    assert row["ratio_added_p50"] == pytest.approx(0.5)
