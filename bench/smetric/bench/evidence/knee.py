"""SMetric against the best baseline at the knee and one rate step past it, from `smetric simulate`
JSONs (one per regime), with the drift of every run and an optional headroom bound.

    python -m smetric.bench.evidence.knee out/ev/coloc-full.json out/ev/pd-full.json ... \\
        [--headroom REGIME_JSON=IDEAL_JSON ...] [--policy smetric] [--markdown]

Per regime (one JSON):

* best baseline: the policy (not an SMetric variant, not a baseline + pieces) with the highest mean over seeds of its
  per-seed peak of the headline metric (TPS within SLO colocated, prefill TPS within the TTFT SLO
  disaggregated);
* knee: the grid rate where that baseline's mean over seeds is highest; "past": the next grid
  rate above it;
* at the knee and past it, SMetric minus the best baseline per seed (the same seed = the same
  agents, so the differences are paired): mean and 95 % t-interval, absolute and relative to
  the baseline's per-seed value, and the verdict (``win`` / ``loss`` when the interval of the
  absolute differences excludes 0, else ``tie``); the same for the peaks (each policy's own best rate per seed);
* drift: the largest ``|arrival_drift|`` over the runs at and past the knee, and how many of them
  exceed the 10 % bound (``arrival_drift_ok`` false).

``--headroom REAL=IDEAL``: the best mean peak of any policy in ``IDEAL`` (the same regime with an
idealised model, e.g. free global-tier loads or HBM that never evicts) over the best baseline's
mean peak in ``REAL``: a loose upper bound on what routing could gain.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from smetric.bench.evidence.inputs import command
from smetric.bench.evidence.pieces import load as load_one
from smetric.bench.evidence.pieces import sweep_name
from smetric.policy.pieces import PIECES_SUFFIX
from smetric.sim.stats import mean_ci95, verdict

Row = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Paired:
    mean: float
    ci: tuple[float, float] | None
    pct_mean: float
    pct_ci: tuple[float, float] | None

    @property
    def verdict(self) -> str:
        """From the paired absolute differences (the relative interval the tables show is unstable
        when a baseline's per-seed value is near 0, e.g. a collapse past the knee)."""
        return verdict(self.ci)


@dataclass(frozen=True, slots=True)
class RegimeEvidence:
    name: str
    metric: str
    seeds: tuple[int, ...]
    best_baseline: str
    knee: float
    past: float | None
    policy_at_knee: float
    baseline_at_knee: float
    at_knee: Paired
    past_knee: Paired | None
    peak: Paired
    drift_max: float
    drift_over: int
    drift_runs: int


def headline(doc: Mapping[str, Any]) -> str:
    cfg = doc["config"]
    mode = cfg.get("mode") or cfg.get("regimes", [{}])[0].get("config", {}).get("mode", "colocated")
    return "tps_within_slo" if mode == "colocated" else "prefill_tps_within_slo"


def _value(row: Row, key: str) -> float:
    v = row.get(key)
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else 0.0


def table(rows: Sequence[Row], key: str) -> dict[str, dict[int, dict[float, float]]]:
    """policy -> seed -> rate -> headline value."""
    out: dict[str, dict[int, dict[float, float]]] = {}
    for r in rows:
        out.setdefault(r["policy"], {}).setdefault(int(r["seed"]), {})[float(r["rate_multiplier"])] = _value(
            r, key
        )
    return out


def paired(a: Mapping[int, float], b: Mapping[int, float]) -> Paired:
    seeds = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in seeds]
    pcts = [100.0 * (a[s] / b[s] - 1.0) for s in seeds if b[s] > 0]
    m, ci = mean_ci95(diffs)
    pm, pci = mean_ci95(pcts)
    return Paired(m, ci, pm, pci)


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs) if xs else math.nan


def is_smetric(policy: str) -> bool:
    return policy.startswith("smetric")


def evidence(name: str, doc: Mapping[str, Any], policy: str = "smetric") -> RegimeEvidence:
    key = headline(doc)
    rows = doc["results"]
    t = table(rows, key)
    if policy not in t:
        raise SystemExit(f"{name}: no rows of {policy!r} (policies: {', '.join(t)})")
    baselines = [p for p in t if not is_smetric(p) and not p.endswith(PIECES_SUFFIX)]  # as shipped
    if not baselines:
        raise SystemExit(f"{name}: no baseline policy in the JSON")

    def mean_peak(p: str) -> float:
        return _mean([max(curve.values()) for curve in t[p].values()])

    best = max(baselines, key=mean_peak)
    seeds = tuple(sorted(t[best]))
    rates = sorted({r for s in seeds for r in t[best][s]} & {r for s in t[policy] for r in t[policy][s]})
    mean_at = {r: _mean([t[best][s][r] for s in seeds if r in t[best][s]]) for r in rates}
    knee = max(rates, key=lambda r: mean_at[r])
    above = [r for r in rates if r > knee]
    past = above[0] if above else None

    def at(p: str, r: float) -> dict[int, float]:
        return {s: c[r] for s, c in t[p].items() if r in c}

    peaks_p = {s: max(c.values()) for s, c in t[policy].items()}
    peaks_b = {s: max(c.values()) for s, c in t[best].items()}
    late = [
        r
        for r in rows
        if float(r["rate_multiplier"]) >= knee
        and r["policy"] in (policy, best)
        and r.get("arrival_drift") is not None
    ]
    drifts = [abs(float(r["arrival_drift"])) for r in late if math.isfinite(float(r["arrival_drift"]))]
    return RegimeEvidence(
        name=name,
        metric=key,
        seeds=seeds,
        best_baseline=best,
        knee=knee,
        past=past,
        policy_at_knee=_mean(list(at(policy, knee).values())),
        baseline_at_knee=mean_at[knee],
        at_knee=paired(at(policy, knee), at(best, knee)),
        past_knee=None if past is None else paired(at(policy, past), at(best, past)),
        peak=paired(peaks_p, peaks_b),
        drift_max=max(drifts, default=math.nan),
        drift_over=sum(1 for r in late if r.get("arrival_drift_ok") is False),
        drift_runs=len(late),
    )


def best_mean_peak(doc: Mapping[str, Any]) -> tuple[str, float]:
    t = table(doc["results"], headline(doc))
    best = max(t, key=lambda p: _mean([max(c.values()) for c in t[p].values()]))
    return best, _mean([max(c.values()) for c in t[best].values()])


def _ci(p: Paired) -> str:
    if p.pct_ci is None:
        return f"{p.pct_mean:+.1f} %"
    return f"{p.pct_mean:+.1f} % [{p.pct_ci[0]:+.1f}, {p.pct_ci[1]:+.1f}] {p.verdict}"


def markdown(evs: Sequence[RegimeEvidence], policy: str) -> str:
    head = (
        f"| regime | best baseline | knee | {policy} / baseline at the knee | {policy} − baseline at the knee "
        f"| one step past (rate) | peak vs peak | max abs drift at/past knee (runs > 10 %) |\n"
        "|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for e in evs:
        k, unit = (1.0, "") if e.metric == "tps_within_slo" else (1e-3, "k prefill")
        past = "n/a" if e.past_knee is None else f"{_ci(e.past_knee)} ({e.past:g}x)"
        lines.append(
            f"| {e.name} | {e.best_baseline} | {e.knee:g}x | {k * e.policy_at_knee:.0f} / {k * e.baseline_at_knee:.0f}{unit} "
            f"| {_ci(e.at_knee)} | {past} | {_ci(e.peak)} | {100 * e.drift_max:.0f} % ({e.drift_over}/{e.drift_runs}) |"
        )
    return head + "\n".join(lines)


def per_rate(name: str, doc: Mapping[str, Any], knee: float | None = None) -> str:
    """Markdown: mean over seeds of the headline per policy (rows) and rate (columns)."""
    key = headline(doc)
    t = table(doc["results"], key)
    rates = sorted({r for curves in t.values() for c in curves.values() for r in c})
    scale = 1.0 if key == "tps_within_slo" else 1e-3
    unit = "TPS within SLO" if key == "tps_within_slo" else "prefill ktok/s within SLO"
    cols = " | ".join(f"**{r:g}x**" if r == knee else f"{r:g}x" for r in rates)
    out = [f"| {name} ({unit}) | {cols} |", "|---" * (len(rates) + 1) + "|"]
    for p, curves in t.items():
        cells = []
        for r in rates:
            vals = [c[r] for c in curves.values() if r in c]
            cells.append(f"{scale * _mean(vals):.0f}" if vals else "")
        out.append(f"| {p} | {' | '.join(cells)} |")
    return "\n".join(out)


def load(spec: str) -> dict[str, Any]:
    """One regime's document (:func:`smetric.bench.evidence.pieces.load`: a JSON, a sweep's
    ``.runs.jsonl`` sidecar, or ``A.json+B.json``)."""
    return load_one(spec)


def _name(spec: str) -> str:
    return sweep_name(spec)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "json",
        nargs="+",
        help="smetric simulate --json outputs, one per regime; A.json+B.json: one regime from two sweeps "
        "(e.g. an extra rate), rows merged",
    )
    ap.add_argument("--policy", default="smetric")
    ap.add_argument("--per-rate", action="store_true", help="also each regime's mean per policy and rate")
    ap.add_argument(
        "--headroom", action="append", default=[], metavar="REAL=IDEAL", help="regime JSON = idealised JSON"
    )
    a = ap.parse_args(argv)
    docs = {_name(p): load(p) for p in a.json}
    evs = [evidence(name, doc, a.policy) for name, doc in docs.items()]
    print(markdown(evs, a.policy))
    if a.per_rate:
        for e, (name, doc) in zip(evs, docs.items(), strict=True):
            print()
            print(per_rate(name, doc, e.knee))
    for pair in a.headroom:
        real, _, ideal = pair.partition("=")
        if not ideal:
            raise SystemExit(f"--headroom {pair!r}: expected REAL=IDEAL")
        rdoc, idoc = load(real), load(ideal)
        t = table(rdoc["results"], headline(rdoc))
        base = max(
            (p for p in t if not is_smetric(p)), key=lambda p: _mean([max(c.values()) for c in t[p].values()])
        )
        base_peak = _mean([max(c.values()) for c in t[base].values()])
        ideal_best, ideal_peak = best_mean_peak(idoc)
        print(
            f"headroom {_name(ideal)}: best {ideal_best} {ideal_peak:.0f} / best real baseline {base} "
            f"{base_peak:.0f} = {ideal_peak / base_peak:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(command(main, None, "python -m smetric.bench.evidence.knee"))
