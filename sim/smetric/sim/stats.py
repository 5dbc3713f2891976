"""Statistics over seeds: each policy's peak per seed, its mean with a 95 % t-interval, and paired
margins between policies (the same seed = the same arrivals, so differences are paired).

Paired t-interval (Student, two-sided 95 %): for per-seed differences ``d_1..d_n``,
``mean(d) ± t_{0.975, n-1} * sd(d) / sqrt(n)``; undefined (``None``) for ``n < 2``. The t
quantiles are the standard table values (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# two-sided 95 % Student t quantiles t_{0.975, df}, df = 1..30; beyond 30 the normal 1.96 is used
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip

Row = Mapping[str, Any]


def t975(df: int) -> float:
    if df < 1:
        raise ValueError("df must be >= 1")
    return _T975[df - 1] if df <= len(_T975) else 1.96


def mean_ci95(xs: Sequence[float]) -> tuple[float, tuple[float, float] | None]:
    """Mean and its 95 % t-interval (``None`` with fewer than two values)."""
    n = len(xs)
    if n == 0:
        return math.nan, None
    m = math.fsum(xs) / n
    if n < 2:
        return m, None
    var = math.fsum((x - m) ** 2 for x in xs) / (n - 1)
    half = t975(n - 1) * math.sqrt(var / n)
    return m, (m - half, m + half)


def _num(x: object) -> float:
    return float(x) if isinstance(x, int | float) and math.isfinite(float(x)) else math.nan


def peaks(rows: Iterable[Row], key: str) -> dict[tuple[str, int], Row]:
    """Per (policy, seed): the row with the highest ``key`` (rows with an undefined value skipped;
    ties -> the lower rate)."""
    best: dict[tuple[str, int], Row] = {}
    for r in rows:
        v = _num(r.get(key))
        if math.isnan(v):
            continue
        k = (str(r["policy"]), int(r["seed"]))
        cur = best.get(k)
        if (
            cur is None
            or v > _num(cur[key])
            or (v == _num(cur[key]) and float(r["rate_multiplier"]) < float(cur["rate_multiplier"]))
        ):
            best[k] = r
    return best


def past_knee(curve: Sequence[Row], key: str, drop: float) -> bool:
    """True when the highest-rate point of a (policy, seed) curve is at least ``drop`` (a
    fraction) below the curve's peak."""
    vals = [(float(r["rate_multiplier"]), _num(r.get(key))) for r in curve]
    vals = [(m, v) for m, v in vals if not math.isnan(v)]
    if not vals:
        return True  # nothing measurable: extending cannot help
    peak = max(v for _, v in vals)
    last = max(vals)[1]
    return peak <= 0 or last <= (1.0 - drop) * peak


def summary(rows: Sequence[Row], key: str, policies: Sequence[str], knee_drop: float) -> list[dict[str, Any]]:
    """One entry per policy: per-seed peaks, mean ± CI, and paired margins against every other policy.

    ``margins[other]``: per-seed ``peak(policy) - peak(other)`` (``diffs``), their mean and 95 %
    paired t-interval, and the same for the relative margin ``diff / peak(other)`` (``pct``).
    """
    best = peaks(rows, key)
    seeds = sorted({int(r["seed"]) for r in rows})
    curves: dict[tuple[str, int], list[Row]] = {}
    for r in rows:
        curves.setdefault((str(r["policy"]), int(r["seed"])), []).append(r)
    out: list[dict[str, Any]] = []
    for p in policies:
        vals = [_num(best[(p, s)][key]) if (p, s) in best else math.nan for s in seeds]
        ok = [v for v in vals if not math.isnan(v)]
        m, ci = mean_ci95(ok)
        entry: dict[str, Any] = {
            "policy": p,
            "metric": key,
            "seeds": seeds,
            "peak_tps_within_slo_per_seed": vals,
            "peak_rate_multiplier_per_seed": [
                float(best[(p, s)]["rate_multiplier"]) if (p, s) in best else None for s in seeds
            ],
            "past_knee_per_seed": [past_knee(curves.get((p, s), []), key, knee_drop) for s in seeds],
            "peak_tps_within_slo_mean": m,
            "peak_tps_within_slo_ci95": list(ci) if ci else None,
            "margins": {},
        }
        for q in policies:
            if q == p:
                continue
            pairs = [
                (_num(best[(p, s)][key]), _num(best[(q, s)][key]))
                for s in seeds
                if (p, s) in best and (q, s) in best
            ]
            diffs = [a - b for a, b in pairs]
            pct = [100.0 * (a - b) / b for a, b in pairs if b > 0]
            dm, dci = mean_ci95(diffs)
            pm, pci = mean_ci95(pct)
            entry["margins"][q] = {
                "diffs": diffs,
                "mean": dm,
                "ci95": list(dci) if dci else None,
                "pct": pct,
                "pct_mean": pm,
                "pct_ci95": list(pci) if pci else None,
            }
        out.append(entry)
    return out


def verdict(ci: Sequence[float] | None) -> str:
    """``win`` / ``loss`` when the 95 % interval excludes 0, else ``tie`` (``n/a`` without one)."""
    if not ci:
        return "n/a"
    lo, hi = ci
    return "win" if lo > 0 else "loss" if hi < 0 else "tie"
