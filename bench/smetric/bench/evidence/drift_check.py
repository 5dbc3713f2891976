"""``python -m smetric.bench.evidence.drift_check SIM.json [...]``: is the offered load steady, and how much does a
single run's arrival drift tell? Per (policy, rate) of ``smetric simulate --json`` outputs (or their
``.runs.jsonl`` sidecars, gzipped as committed):

* **mean drift** over the seeds with its 95 % t-interval: a generator that ramps (or decays) shows
  a mean away from 0; a steady one a mean whose interval holds 0 (run many seeds: the per-run
  spread is large);
* **sd** of the per-run drift and the **share of runs over the 10 % bound**;
* the **Poisson floor**: the share of runs a stationary Poisson stream with the same quarter
  counts would put over the bound (drift = Q4 / Q1 - 1 with Q1, Q4 ~ Poisson(q), q the mean of the
  run's two quarter counts; normal approximation, sd of the drift ~ sqrt(2 / q)). Above the floor,
  the spread is the workload's own burstiness (agents alternating between work and long idle
  gaps), not the generator's start-up.

A benchmark: it reports, it does not pass or fail.
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from smetric.bench.evidence.inputs import SWEEP, InputError, command, read_json
from smetric.bench.evidence.pieces import load as load_sweep
from smetric.bench.evidence.pieces import parse_rates, sweep_name
from smetric.sim.metrics import MAX_ARRIVAL_DRIFT
from smetric.sim.stats import mean_ci95


def poisson_over(quarter_count: float, bound: float = MAX_ARRIVAL_DRIFT) -> float:
    """P(|Q4 / Q1 - 1| > bound) for independent Q1, Q4 ~ Poisson(quarter_count), normal approx."""
    if not (quarter_count > 0):
        return math.nan
    sd = math.sqrt(2.0 / quarter_count)
    return math.erfc(bound / sd / math.sqrt(2.0))


def _quarter_s(row: dict[str, Any], measure_s: float | None) -> float:
    """A quarter of the row's measurement window (its own window when it records one)."""
    if row.get("window_start_s") is not None and row.get("window_end_s") is not None:
        return (float(row["window_end_s"]) - float(row["window_start_s"])) / 4.0
    if measure_s is None:
        raise InputError(f"row {row.get('policy')} seed {row.get('seed')}: no measurement window")
    return measure_s / 4.0


def rows(specs: Sequence[Path | str]) -> list[dict[str, Any]]:
    """The runs of ``smetric simulate --json`` outputs or their ``.runs.jsonl`` sidecars (gzipped as
    committed; ``A+B`` and ``A@policy`` as :func:`smetric.bench.evidence.pieces.load` reads them), each
    with its quarter's length and its (first) file's name."""
    out: list[dict[str, Any]] = []
    for spec in map(str, specs):
        if "+" in spec or "@" in spec or spec.endswith((".runs.jsonl", ".runs.jsonl.gz")):
            doc = load_sweep(spec)
            measure_s = None
        else:
            doc = read_json(spec, keys=("config", "results"))
            if "measure_s" not in doc["config"]:
                raise InputError(f"{spec}: not {SWEEP} (its config has no 'measure_s')")
            measure_s = float(doc["config"]["measure_s"])
        name = sweep_name(spec)
        for r in doc["results"]:
            out.append({**r, "_quarter_s": _quarter_s(r, measure_s), "_file": name})
    return out


def _sd(xs: Sequence[float]) -> float:
    """The sample standard deviation (``nan`` with fewer than two values)."""
    if len(xs) < 2:
        return math.nan
    m = math.fsum(xs) / len(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _drifts(all_rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], float]]:
    return [
        (r, float(r["arrival_drift"]))
        for r in all_rows
        if r.get("arrival_drift") is not None and math.isfinite(float(r["arrival_drift"]))
    ]


def spread(all_rows: list[dict[str, Any]]) -> tuple[float, int, float, int]:
    """Whose drift is it? The mean sd of the drift across policies on one seed (same file and rate)
    and across seeds for one policy, with the number of groups of each: a drift that follows the seed
    (the trace's arrivals), not the policy, leaves a comparison paired on the seed unbiased."""
    by_seed: dict[tuple[str, float, int], list[float]] = defaultdict(list)
    by_policy: dict[tuple[str, float, str], list[float]] = defaultdict(list)
    for r, d in _drifts(all_rows):
        by_seed[(r["_file"], float(r["rate_multiplier"]), int(r["seed"]))].append(d)
        by_policy[(r["_file"], float(r["rate_multiplier"]), str(r["policy"]))].append(d)
    a = [_sd(v) for v in by_seed.values() if len(v) > 1]
    b = [_sd(v) for v in by_policy.values() if len(v) > 1]
    return mean_ci95(a)[0], len(a), mean_ci95(b)[0], len(b)


def summary(all_rows: list[dict[str, Any]]) -> list[str]:
    """The runs over the bound, the largest drift, and :func:`spread`."""
    d = [x for _, x in _drifts(all_rows)]
    if not d:
        return []
    over = sum(1 for x in d if abs(x) > MAX_ARRIVAL_DRIFT)
    out = [
        f"runs over the {100 * MAX_ARRIVAL_DRIFT:.0f} % bound: {over} of {len(d)}; largest |drift| {100 * max(map(abs, d)):.1f} %"
    ]
    across_policies, n_seeds, across_seeds, n_policies = spread(all_rows)
    if n_seeds and n_policies:
        out.append(
            f"drift sd across policies on one seed {100 * across_policies:.1f} pp ({n_seeds} groups), "
            f"across seeds for one policy {100 * across_seeds:.1f} pp ({n_policies} groups)"
        )
    return out


def table(all_rows: list[dict[str, Any]]) -> list[str]:
    groups: dict[tuple[str, str, float], list[dict[str, Any]]] = defaultdict(list)
    for r in all_rows:
        if r.get("arrival_drift") is None or not math.isfinite(float(r["arrival_drift"])):
            continue
        groups[(r["_file"], r["policy"], float(r["rate_multiplier"]))].append(r)
    lines = [
        "| sweep | policy | rate | runs | mean drift (95 % CI) | sd | runs over 10 % | Poisson floor | requests per quarter |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (name, policy, rate), rs in sorted(groups.items()):
        d = [float(r["arrival_drift"]) for r in rs]
        m, ci = mean_ci95(d)
        sd = _sd(d)
        q = [
            (float(r["arrival_rate_start_per_s"]) + float(r["arrival_rate_end_per_s"])) / 2 * r["_quarter_s"]
            for r in rs
        ]
        floor = math.fsum(poisson_over(x) for x in q) / len(q)
        over = sum(1 for x in d if abs(x) > MAX_ARRIVAL_DRIFT)
        ci_s = "n/a" if ci is None else f"[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]"
        lines.append(
            f"| {name} | {policy} | {rate:g}x | {len(d)} | {100 * m:+.1f} % {ci_s} | {100 * sd:.1f} % "
            f"| {over}/{len(d)} | {100 * floor:.0f} % | {math.fsum(q) / len(q):.0f} |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "json",
        nargs="+",
        help="smetric simulate --json outputs or their .runs.jsonl(.gz) sidecars",
    )
    ap.add_argument("--rates", type=parse_rates, default=None, help="R1,R2,...: only these rates' runs")
    a = ap.parse_args(argv)
    got = [r for r in rows(a.json) if a.rates is None or float(r["rate_multiplier"]) in a.rates]
    print("\n".join(table(got)))
    print("\n".join(["", *summary(got)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(command(main, None, "python -m smetric.bench.evidence.drift_check"))
