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


def rows(paths: list[Path]) -> list[dict[str, Any]]:
    """The runs of ``smetric simulate --json`` outputs or their ``.runs.jsonl`` sidecars (gzipped as
    committed), each with its quarter's length and its file's name."""
    out: list[dict[str, Any]] = []
    for p in paths:
        if p.name.endswith((".runs.jsonl", ".runs.jsonl.gz")):
            doc = load_sweep(str(p))
            measure_s = None
            name = p.name.removesuffix(".gz").removesuffix(".runs.jsonl")
        else:
            doc = read_json(p, keys=("config", "results"))
            if "measure_s" not in doc["config"]:
                raise InputError(f"{p}: not {SWEEP} (its config has no 'measure_s')")
            measure_s = float(doc["config"]["measure_s"])
            name = p.stem
        for r in doc["results"]:
            out.append({**r, "_quarter_s": _quarter_s(r, measure_s), "_file": name})
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
        sd = math.sqrt(math.fsum((x - m) ** 2 for x in d) / (len(d) - 1)) if len(d) > 1 else math.nan
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
        type=Path,
        help="smetric simulate --json outputs or their .runs.jsonl(.gz) sidecars",
    )
    a = ap.parse_args(argv)
    print("\n".join(table(rows(a.json))))
    return 0


if __name__ == "__main__":
    raise SystemExit(command(main, None, "python -m smetric.bench.evidence.drift_check"))
