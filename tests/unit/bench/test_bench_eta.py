"""The bench's overall progress line and its estimate of the time left."""

from __future__ import annotations

import pytest

from smetric.bench.eta import RunCount, duration_text


def test_durations_read_as_a_person_writes_them() -> None:
    assert duration_text(42.4) == "42 s"
    assert duration_text(185) == "3 min 05 s"
    assert duration_text(3720) == "1 h 02 min"
    assert duration_text(float("nan")) == "?" and duration_text(-1) == "?"


def test_the_time_left_is_the_mean_run_times_the_runs_to_go() -> None:
    count = RunCount.fixed(rates=3, seeds=2, rows=3)
    assert count.total == 18
    assert count.line(0, 0.0) == "progress: 0 of 18 runs done in 0 s"
    assert count.line(6, 120.0) == "progress: 6 of 18 runs done in 2 min 00 s, about 4 min 00 s left"
    assert count.line(18, 360.0).endswith("18 of 18 runs done in 6 min 00 s, finished")


def test_a_knee_search_gives_an_upper_bound_and_never_a_negative_estimate() -> None:
    count = RunCount.knee_search(max_probes=5, seeds=3, rows=2)
    assert count.total == (5 + 4) * 2 and count.upper_bound
    assert "of at most 18 runs" in count.line(3, 30.0) and "about 2 min 30 s left" in count.line(3, 30.0)
    assert "of at most 19 runs" in count.line(19, 10.0)  # more than the bound: the count grows


def test_an_empty_plan_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one run"):
        RunCount(0)
