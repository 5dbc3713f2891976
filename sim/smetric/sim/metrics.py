"""Run metrics: per-request records, load-imbalance windows, and the summary of one run.

Definitions (paper §4.1, §5.2, §5.3):

* Measurement window ``[warmup_s, warmup_s + measure_s)``: the same for every policy at a rate.
  Every per-request statistic covers the requests *sent* in the window (all of them complete:
  the simulator drains in-flight work after the last send), and rates divide by its length.
* ``tps_within_slo``: output tokens per second counted only from requests meeting both the TTFT
  and the TPOT SLO (colocated).
* ``prefill_tps_within_slo``: prompt tokens (computed or reused) per second of requests meeting
  the TTFT SLO -- the disaggregated headline; reported in both modes.
* ``slo_attainment``: share of served (not dropped) requests meeting the mode's SLO(s).
* ``reuse_ratio`` / ``local_hit_ratio`` / ``global_hit_ratio``: shares of served prompt tokens
  reused from any tier / the instance's GPU tier / the global tier.
* Load imbalance: each instance's time-averaged load per 30 s window; per window max/mean over
  instances (windows with no load skipped); reported as mean and p99 over windows. Load is the
  number of running requests (colocated) or running + waiting (disaggregated prefill instances,
  as the paper's §5.3 figure counts them).
* ``arrival_rate_start_per_s`` / ``arrival_rate_end_per_s``: requests sent per second in the first
  and the last quarter of the window; ``arrival_drift`` = end / start - 1 (stationarity check of the
  offered load: a workload ramp raises it, a closed loop falling behind lowers it);
  ``arrival_drift_ok`` = ``|arrival_drift| <=`` :data:`MAX_ARRIVAL_DRIFT` (a run outside it did not
  see a steady load: its figures depend on the window's length).
* ``requests_dropped``: requests answered with an error, over the length limit or refused by the
  engine; ``requests_engine_rejected`` counts the latter (reason ``engine_rejected``).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from smetric.core.slo import SloConfig

MAX_ARRIVAL_DRIFT = 0.10  # |arrival drift| above this flags a run whose offered load was not steady


def arrival_drift(send_s: npt.ArrayLike, lo_s: float, hi_s: float) -> tuple[float, float, float, bool]:
    """``(start rate, end rate, drift, ok)`` of the sends in the window ``[lo_s, hi_s)``: requests
    sent per second in its first and last quarter, ``end / start - 1`` (NaN without a send in the
    first quarter) and ``|drift| <=`` :data:`MAX_ARRIVAL_DRIFT` (NaN is not ok)."""
    t = np.asarray(send_s, dtype=np.float64)
    quarter = max(hi_s - lo_s, 1e-9) / 4.0
    rate_start = float(((t >= lo_s) & (t < lo_s + quarter)).sum()) / quarter
    rate_end = float(((t >= hi_s - quarter) & (t < hi_s)).sum()) / quarter
    drift = rate_end / rate_start - 1.0 if rate_start > 0 else math.nan
    return rate_start, rate_end, drift, bool(abs(drift) <= MAX_ARRIVAL_DRIFT)


class LoadTracker:
    """Integrates each instance's load over fixed windows (piecewise-constant load)."""

    __slots__ = ("_area", "_last_t", "_last_v", "_n", "window_s")

    def __init__(self, n_instances: int, window_s: float) -> None:
        if window_s <= 0:
            raise ValueError("window_s must be > 0")
        self._n = n_instances
        self.window_s = window_s
        self._last_t = [0.0] * n_instances
        self._last_v = [0] * n_instances
        self._area: list[list[float]] = []

    def update(self, i: int, t: float, value: int) -> None:
        """Instance ``i``'s load is ``value`` from time ``t`` on."""
        v = self._last_v[i]
        if value == v:
            return
        self._integrate(i, t)
        self._last_v[i] = value

    def _integrate(self, i: int, t: float) -> None:
        t0, v = self._last_t[i], self._last_v[i]
        self._last_t[i] = t
        if v == 0 or t <= t0:
            return
        w = self.window_s
        k = int(t0 // w)
        while True:
            edge = (k + 1) * w
            seg_end = t if t < edge else edge
            while len(self._area) <= k:
                self._area.append([0.0] * self._n)
            self._area[k][i] += v * (seg_end - t0)
            if t <= edge:
                return
            t0, k = edge, k + 1

    def window_loads(self, end_s: float) -> npt.NDArray[np.float64]:
        """``(windows, instances)`` time-averaged load per window, integrated up to ``end_s``."""
        for i in range(self._n):
            self._integrate(i, end_s)
        if not self._area:
            return np.zeros((0, self._n))
        return np.asarray(self._area, dtype=np.float64) / self.window_s


def imbalance(
    loads: npt.NDArray[np.float64], window_s: float, lo_s: float, hi_s: float
) -> npt.NDArray[np.float64]:
    """max/mean over instances of each window inside ``[lo_s, hi_s]`` that has any load."""
    if loads.size == 0:
        return np.empty(0)
    k = np.arange(loads.shape[0])
    inside = (k * window_s >= lo_s) & ((k + 1) * window_s <= hi_s + 1e-9)
    a = loads[inside]
    mean = a.mean(axis=1)
    ok = mean > 0
    return np.asarray(a[ok].max(axis=1) / mean[ok], dtype=np.float64)


def _pct(x: npt.NDArray[np.float64], q: float) -> float:
    return float(np.percentile(x, q)) if x.size else math.nan


def summarise(
    *,
    mode: str,
    slo: SloConfig,
    prompt: npt.NDArray[np.int64],
    output: npt.NDArray[np.int64],
    send_s: npt.NDArray[np.float64],
    first_s: npt.NDArray[np.float64],
    finish_s: npt.NDArray[np.float64],
    local: npt.NDArray[np.int64],
    global_: npt.NDArray[np.int64],
    dropped: npt.NDArray[np.bool_],
    window_loads: npt.NDArray[np.float64],
    load_window_s: float,
    lo_s: float,
    hi_s: float,
    rejected: npt.NDArray[np.bool_] | None = None,
) -> dict[str, float | int]:
    """The summary numbers of one run (see the module docstring). ``rejected``: requests the
    engine refused (dropped too), none when not given."""
    if rejected is None:
        rejected = np.zeros_like(dropped)
    dropped = dropped | rejected
    colocated = mode == "colocated"
    done_s = finish_s if colocated else first_s
    lo, hi = lo_s, hi_s
    span = max(hi - lo, 1e-9)
    in_window = (send_s >= lo) & (send_s < hi)
    served = in_window & ~dropped & np.isfinite(done_s)
    ttft = (first_s - send_s)[served]
    p, o = prompt[served], output[served]
    ttft_ok = ttft <= slo.ttft_base_s + slo.ttft_per_ktok_s * p / 1000.0
    if colocated:
        tpot = np.where(o > 1, (finish_s[served] - first_s[served]) / np.maximum(o - 1, 1), 0.0)
        tpot_ok = tpot <= slo.tpot_s
    else:
        tpot = np.empty(0)
        tpot_ok = np.ones_like(ttft_ok)
    ok = ttft_ok & tpot_ok
    imb = imbalance(window_loads, load_window_s, float(lo), float(hi))
    ptoks = float(p.sum())
    rate_start, rate_end, drift, drift_ok = arrival_drift(send_s, lo, hi)
    reused_local, reused_global = float(local[served].sum()), float(global_[served].sum())
    return {
        "tps_within_slo": float(o[ok].sum()) / span if colocated else math.nan,
        "prefill_tps_within_slo": float(p[ttft_ok].sum()) / span,
        "output_tps": float(o.sum()) / span,
        "requests_per_s": float(in_window.sum()) / span,
        "arrival_rate_start_per_s": rate_start,
        "arrival_rate_end_per_s": rate_end,
        "arrival_drift": drift,
        "arrival_drift_ok": drift_ok,
        "slo_attainment": float(ok.mean()) if ok.size else math.nan,
        "ttft_attainment": float(ttft_ok.mean()) if ttft_ok.size else math.nan,
        "ttft_p50_s": _pct(ttft, 50),
        "ttft_p90_s": _pct(ttft, 90),
        "ttft_p99_s": _pct(ttft, 99),
        "tpot_p50_s": _pct(tpot, 50),
        "tpot_p90_s": _pct(tpot, 90),
        "reuse_ratio": (reused_local + reused_global) / ptoks if ptoks else math.nan,
        "local_hit_ratio": reused_local / ptoks if ptoks else math.nan,
        "global_hit_ratio": reused_global / ptoks if ptoks else math.nan,
        "imbalance_mean": float(imb.mean()) if imb.size else math.nan,
        "imbalance_p99": _pct(imb, 99),
        "requests_sent": int(send_s.size),
        "requests_in_window": int(in_window.sum()),
        "requests_served_in_window": int(served.sum()),
        "requests_dropped": int(dropped.sum()),
        "requests_dropped_in_window": int((dropped & in_window).sum()),
        "requests_engine_rejected": int(rejected.sum()),
        "requests_engine_rejected_in_window": int((rejected & in_window).sum()),
        "window_start_s": float(lo),
        "window_end_s": float(hi),
    }
