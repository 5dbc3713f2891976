"""Load sweep of ``smetric bench``: the knee search, and the mean and spread over seeds per row.

Knee: the first family arrival rate at which the *best* row's SLO attainment drops below
:data:`KNEE_ATTAINMENT`. Without ``--rates`` the bench walks a geometric ladder of rates
(``start * factor**k``) with the first seed only: up while the best row still meets 90 %, down
while it does not, until two neighbouring rungs bracket the knee (or ``max_probes`` rungs were
tried). Those probe rows are the first seed's rows of their rate, so nothing is run twice; then
the knee and the rung past it are run with every seed. A rung's verdict is a whole ladder step
(x sqrt 2 by default) away from its neighbours', so the run-to-run noise of one seed moves the
knee by at most one rung; the verdict is re-checked on the seed means and both are reported.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from smetric.bench.metrics import Summary
from smetric.bench.report import PolicyResult

KNEE_ATTAINMENT = 0.90  # the knee: the first rate where the best row's SLO attainment drops below this
_COUNTS = ("n_sent", "n_ok", "n_failed", "n_not_sent", "n_server_timed")
SPREAD_FIELDS = (
    "tps_within_slo",
    "slo_attainment",
    "tps_within_slo_all_scaled",
    "slo_attainment_all_scaled",
    "ttft_p90_s",
    "local_hit_ratio",
)
# per seed as well, not spread: the stationarity check of each run (metrics.py)
DRIFT_FIELDS = ("arrival_drift", "arrival_drift_ok")


def rung(rate: float) -> float:
    """Rates as ladder keys: 3 significant digits, so start * factor**k compares equal."""
    return float(f"{rate:.3g}")


@dataclass(frozen=True, slots=True)
class Cell:
    """One row of one (rate, seed) run."""

    rate: float
    seed: int
    result: PolicyResult


def best_attainment(results: Iterable[PolicyResult]) -> float:
    """Highest SLO attainment among the rows that ran (NaN when none did)."""
    vals = [r.summary.slo_attainment for r in results if r.summary is not None]
    vals = [v for v in vals if not math.isnan(v)]
    return max(vals) if vals else float("nan")


@dataclass(frozen=True, slots=True)
class KneeSearch:
    start: float
    factor: float = math.sqrt(2.0)
    max_probes: int = 5

    def __post_init__(self) -> None:
        if not (self.start > 0 and self.factor > 1 and self.max_probes >= 1):
            raise ValueError("knee search needs start > 0, factor > 1, max_probes >= 1")

    def step(self, rate: float, k: int) -> float:
        """The rung ``k`` steps from ``rate``'s rung (computed from the start, so rungs compare equal)."""
        here = round(math.log(rate / self.start) / math.log(self.factor))
        return rung(self.start * self.factor ** (here + k))

    def next_rate(self, probed: Mapping[float, float]) -> float | None:
        """The next rung to probe given ``rate -> best attainment`` so far, or None when done."""
        if not probed:
            return rung(self.start)
        if len(probed) >= self.max_probes:
            return None
        above = sorted(r for r, a in probed.items() if not a >= KNEE_ATTAINMENT)  # NaN counts as a miss
        below = sorted(r for r, a in probed.items() if a >= KNEE_ATTAINMENT)
        if not above:
            return self.step(below[-1], 1)
        knee = above[0]
        neighbour = self.step(knee, -1)
        if neighbour in probed:
            return None
        if below and below[-1] > neighbour:  # noisy ladder (a lower rung missed): the bracket is there
            return None
        return neighbour

    def knee(self, probed: Mapping[float, float]) -> float | None:
        """The first rung below 90 % (None when every probed rung met it)."""
        above = sorted(r for r, a in probed.items() if not a >= KNEE_ATTAINMENT)
        return above[0] if above else None


@dataclass(frozen=True, slots=True)
class Row:
    """A front end at one rate over its seeds (what the table, the JSON and the plot show)."""

    label: str
    router: str
    policy: str
    status: str
    note: str
    rate: float
    point: str  # "knee" | "past knee" | "below knee" | "sweep"
    seeds: tuple[int, ...]
    summary: dict[str, float] | None
    per_seed: tuple[dict[str, Any], ...]
    # TPS within SLO minus the reference row's (the first picker policy), paired by seed:
    # {"vs", "seeds", "mean", "ci95"} (ci95 = half-width of the t interval; None below 2 seeds)
    paired: dict[str, Any] | None = None
    agents: int | None = None  # steady agents at this rate (--arrivals agents), else None

    def mean(self, name: str) -> float:
        return float("nan") if self.summary is None else float(self.summary.get(name, float("nan")))

    def spread(self, name: str) -> float:
        return self.mean(f"{name}_spread")


def _spread(values: Sequence[float]) -> float:
    """Sample standard deviation over seeds (NaN with fewer than two)."""
    vals = [v for v in values if not math.isnan(v)]
    return float(np.std(vals, ddof=1)) if len(vals) >= 2 else float("nan")


def aggregate(cells: Sequence[Cell], rate: float, label: str, point: str) -> Row:
    """Mean (counts: sum) and spread over the seeds that ran; failed seeds are listed with why."""
    mine = sorted((c for c in cells if c.rate == rate and c.result.label == label), key=lambda c: c.seed)
    first = mine[0].result
    ran = [c for c in mine if c.result.summary is not None]
    per_seed = tuple(
        {"seed": c.seed, "status": c.result.status, "note": c.result.note}
        | (
            {k: getattr(c.result.summary, k) for k in (*SPREAD_FIELDS, *DRIFT_FIELDS)}
            if c.result.summary is not None
            else {}
        )
        for c in mine
    )
    if not ran:
        return Row(label, first.router, first.policy, first.status, first.note, rate, point,
                   tuple(c.seed for c in mine), None, per_seed)  # fmt: skip
    sums: list[Summary] = [c.result.summary for c in ran if c.result.summary is not None]
    summary: dict[str, float] = {}
    for f in dataclasses.fields(Summary):
        values = [float(getattr(s, f.name)) for s in sums]
        if f.name in _COUNTS:
            summary[f.name] = float(sum(values))
        else:
            finite = [v for v in values if not math.isnan(v)]
            summary[f.name] = float(np.mean(finite)) if finite else float("nan")
    for name in SPREAD_FIELDS:
        summary[f"{name}_spread"] = _spread([float(getattr(s, name)) for s in sums])
    summary["arrival_drift_ok"] = all(s.arrival_drift_ok for s in sums)  # every seed's run within the bound
    drifts = [abs(s.arrival_drift) for s in sums if not math.isnan(s.arrival_drift)]
    summary["arrival_drift_max_abs"] = max(drifts, default=float("nan"))
    failed = [c for c in mine if c.result.summary is None]
    note = "; ".join(f"seed {c.seed}: {c.result.note}" for c in failed) or first.note
    status = "ok" if not failed else "partial"
    return Row(label, first.router, first.policy, status, note, rate, point,
               tuple(c.seed for c in ran), summary, per_seed)  # fmt: skip


# two-sided 95 % Student t quantiles by degrees of freedom (1..9), for the paired intervals
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262)


def paired_diff(cells: Sequence[Cell], rate: float, label: str, ref: str) -> dict[str, Any] | None:
    """Paired (same seed: same families, arrivals and messages) TPS-within-SLO difference to ``ref``."""

    def tps(lab: str) -> dict[int, float]:
        return {c.seed: c.result.summary.tps_within_slo for c in cells
                if c.rate == rate and c.result.label == lab and c.result.summary is not None}  # fmt: skip

    mine, theirs = tps(label), tps(ref)
    seeds = sorted(set(mine) & set(theirs))
    if label == ref or not seeds:
        return None
    mean, half = paired_interval([mine[k] - theirs[k] for k in seeds])
    return {"vs": ref, "seeds": seeds, "mean": mean, "ci95": half}


def paired_interval(diffs: Sequence[float]) -> tuple[float, float | None]:
    """Mean of paired differences and the half-width of its two-sided 95 % Student t interval
    (``None`` below two pairs)."""
    n = len(diffs)
    if n == 0:
        return float("nan"), None
    half = _T95[min(n - 2, len(_T95) - 1)] * float(np.std(diffs, ddof=1)) / math.sqrt(n) if n >= 2 else None
    return float(np.mean(diffs)), half


def pooled(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Each row label's TPS within SLO relative to the reference's, paired by (rate, seed) over every
    load point: one value per run pair, ``100 * (mine / ref - 1)``, and the two-sided 95 % Student t
    interval over them. With two seeds a per-load interval has one degree of freedom (t = 12.7); over
    three loads the pairs have five. The interval counts the loads' differences from each other as
    noise, so it is wider, not narrower, than one that modelled them. A pair whose reference served
    nothing within SLO has no ratio and is left out (``skipped``)."""
    ref = next((r.paired["vs"] for r in rows if r.paired), "")
    if not ref:
        return []

    def tps(row: Row) -> dict[int, float]:
        return {int(s["seed"]): float(s["tps_within_slo"]) for s in row.per_seed
                if isinstance(s.get("tps_within_slo"), int | float)}  # fmt: skip

    base = {r.rate: tps(r) for r in rows if r.label == ref and r.summary is not None}
    out: list[dict[str, Any]] = []
    for label in dict.fromkeys(r.label for r in rows if r.label != ref):
        mine_rows = [r for r in rows if r.label == label and r.rate in base]
        pcts: list[float] = []
        skipped = 0
        for row in mine_rows:
            for seed, mine in sorted(tps(row).items()):
                theirs = base[row.rate].get(seed)
                if theirs is None or math.isnan(mine) or math.isnan(theirs):
                    continue
                if theirs <= 0.0:
                    skipped += 1
                    continue
                pcts.append(100.0 * (mine / theirs - 1.0))
        if not pcts:
            continue
        mean, half = paired_interval(pcts)
        loads = len({r.rate for r in mine_rows})
        out.append({"label": label, "vs": ref, "loads": loads, "pairs": len(pcts), "skipped": skipped,
                    "mean_pct": mean, "ci95_pct": half})  # fmt: skip
    return out


def point_of(rate: float, knee: float | None, past: float | None) -> str:
    if knee is None:
        return "sweep"
    if rate == knee:
        return "knee"
    if past is not None and rate >= past:
        return "past knee"
    return "below knee" if rate < knee else "past knee"


def rows_of(
    cells: Sequence[Cell], labels: Sequence[str], knee: float | None, past: float | None
) -> list[Row]:
    rates = sorted({c.rate for c in cells})
    ref = labels[0] if labels else ""
    out: list[Row] = []
    for rate in rates:
        present = {c.result.label for c in cells if c.rate == rate}
        for lab in labels:
            if lab in present:
                row = aggregate(cells, rate, lab, point_of(rate, knee, past))
                out.append(dataclasses.replace(row, paired=paired_diff(cells, rate, lab, ref)))
    return out


def best_mean_attainment(rows: Sequence[Row], rate: float) -> tuple[str, float]:
    """(label, mean SLO attainment) of the best row at ``rate``."""
    cands = [(r.mean("slo_attainment"), r.label) for r in rows if r.rate == rate and r.summary is not None]
    cands = [c for c in cands if not math.isnan(c[0])]
    if not cands:
        return "", float("nan")
    att, label = max(cands)
    return label, att


# Rows whose router routes by load only on the emulated cluster (docs/bench.md, "Limits"): vllm-router's
# kv_aware renders every request but none of its KV placement lookups match the emulator's blocks.
LOAD_ONLY = frozenset({"vllm-router:kv_aware"})


def shown_label(label: str) -> str:
    """A row's label as the table, the Markdown and the figure show it ("(load only)" where it is)."""
    return f"{label} (load only)" if label in LOAD_ONLY else label


def row_dict(row: Row) -> dict[str, Any]:
    return dataclasses.asdict(row)
