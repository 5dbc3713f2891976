"""Run metrics on hand-made numbers: SLO accounting, windows, reuse shares, load imbalance."""

from __future__ import annotations

import math

import numpy as np
import pytest

from smetric.core.slo import SloConfig
from smetric.sim.metrics import LoadTracker, imbalance, summarise

SLO = SloConfig(1.0, 0.0625, 0.020)


def arrays(**cols: list[float]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in cols.items()}


def run(mode: str = "colocated") -> dict[str, float | int]:
    # 4 requests sent in the window [0, 10), one after it, one dropped
    a = arrays(
        prompt=[1000, 2000, 1000, 4000, 1000, 300_000],
        output=[11, 21, 11, 5, 11, 3],
        send_s=[0.0, 1.0, 2.0, 3.0, 12.0, 4.0],
        #        ttft 0.5 (ok) 2.0 (slo 1.125: miss) 0.5 (ok) 0.5 (ok)
        first_s=[0.5, 3.0, 2.5, 3.5, 12.5, math.nan],
        #        tpot 0.01 ok, 0.01, 0.03 (miss), 0.01
        finish_s=[0.6, 3.2, 2.8, 3.54, 12.6, math.nan],
        local=[500, 1000, 0, 3000, 0, 0],
        global_=[0, 500, 500, 0, 0, 0],
    )
    return summarise(
        mode=mode,
        slo=SLO,
        prompt=a["prompt"].astype(np.int64),
        output=a["output"].astype(np.int64),
        send_s=a["send_s"],
        first_s=a["first_s"],
        finish_s=a["finish_s"],
        local=a["local"].astype(np.int64),
        global_=a["global_"].astype(np.int64),
        dropped=np.array([False, False, False, False, False, True]),
        window_loads=np.zeros((0, 2)),
        load_window_s=30.0,
        lo_s=0.0,
        hi_s=10.0,
    )


def test_colocated_counts_only_requests_meeting_both_slos() -> None:
    m = run()
    assert m["requests_in_window"] == 5 and m["requests_served_in_window"] == 4
    assert m["requests_dropped"] == 1 and m["requests_dropped_in_window"] == 1
    assert m["tps_within_slo"] == pytest.approx((11 + 5) / 10.0)  # requests 0 and 3
    assert m["output_tps"] == pytest.approx((11 + 21 + 11 + 5) / 10.0)
    assert m["slo_attainment"] == pytest.approx(0.5)
    assert m["ttft_attainment"] == pytest.approx(0.75)
    assert m["prefill_tps_within_slo"] == pytest.approx((1000 + 1000 + 4000) / 10.0)
    assert m["requests_per_s"] == pytest.approx(0.5)
    assert m["ttft_p50_s"] == pytest.approx(0.5)


def test_reuse_shares_are_of_served_prompt_tokens() -> None:
    m = run()
    total = 1000 + 2000 + 1000 + 4000
    assert m["local_hit_ratio"] == pytest.approx(4500 / total)
    assert m["global_hit_ratio"] == pytest.approx(1000 / total)
    assert m["reuse_ratio"] == pytest.approx(5500 / total)


def test_disaggregated_ignores_tpot() -> None:
    m = run("disaggregated")
    assert math.isnan(float(m["tps_within_slo"]))
    assert m["slo_attainment"] == pytest.approx(0.75)
    assert math.isnan(float(m["tpot_p90_s"]))


def test_load_tracker_time_averages_per_window() -> None:
    t = LoadTracker(2, window_s=10.0)
    t.update(0, 0.0, 2)  # instance 0: load 2 on [0, 15)
    t.update(0, 15.0, 0)
    t.update(1, 5.0, 1)  # instance 1: load 1 on [5, 20)
    t.update(1, 20.0, 0)
    loads = t.window_loads(20.0)
    np.testing.assert_allclose(loads, [[2.0, 0.5], [1.0, 1.0]])
    imb = imbalance(loads, 10.0, 0.0, 20.0)
    np.testing.assert_allclose(imb, [2.0 / 1.25, 1.0])
    assert imbalance(loads, 10.0, 10.0, 20.0).tolist() == [1.0]  # only windows inside the range


def test_idle_windows_are_skipped() -> None:
    t = LoadTracker(3, window_s=5.0)
    t.update(2, 12.0, 3)
    loads = t.window_loads(15.0)
    assert imbalance(loads, 5.0, 0.0, 15.0).tolist() == [3.0]
    with pytest.raises(ValueError):
        LoadTracker(1, 0.0)
