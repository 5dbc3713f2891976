"""smetric.bench.evidence.default_policy: the count of regimes where a policy is not clearly worse than the
regime's best (paired 95 % CI over seeds), then the mean relative peak."""

from __future__ import annotations

from types import ModuleType

import pytest

from smetric.bench.evidence import default_policy


def _module() -> ModuleType:
    return default_policy


def test_counts_regimes_and_ranks_by_count_then_mean_relative_peak() -> None:
    mod = _module()
    peaks = {
        "r1": {"a": [100.0, 110.0, 90.0], "b": [99.0, 111.0, 89.0], "c": [50.0, 55.0, 45.0]},
        "r2": {"a": [80.0, 82.0, 81.0], "b": [100.0, 102.0, 101.0], "c": [100.0, 101.0, 99.0]},
    }
    rows = mod.support(peaks)
    assert [(r.policy, r.ok) for r in rows] == [("b", 2), ("a", 1), ("c", 1)]
    a = next(r for r in rows if r.policy == "a")
    assert a.worse_in and a.worse_in[0].startswith("r2 vs b")
    assert a.mean_rel == pytest.approx((1.0 + 81.0 / 101.0) / 2)
