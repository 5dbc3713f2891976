"""``smetric bench --compare-sim``: the simulator's ranking of the same policies next to the bench's.

The simulator runs as ``smetric simulate`` (a child process, so the two tools stay decoupled) on
the same trace, the same instance count and preset, the same picker policies and seeds, and a
family sample of the same fraction (the bench's share of the trace's families at its knee, drawn by
``subsample_families`` with the same seeds -- not the same families: the simulator draws from all
of the trace's families, the bench from those with a prompt that fits one instance). What cannot
be the same: the simulator replays
full-size prompts over 20 + 20 simulated minutes, the bench prompts x token scale over its own
window; both start families as the bench's ``--arrivals`` says (steady agents by default); the
simulator has no model of vllm-router. The bench ranks the policies by mean TPS within SLO at its knee (the
first rate where the best policy's mean SLO attainment is below 90 %); the simulator by its peak TPS
within SLO over its rates (see :func:`sim_scores`); the rank correlation of the two orders
(Spearman's rho and Kendall's tau-b over the common policies) is reported.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.console import Console
from rich.table import Table

from smetric.bench.cpu import picker_timers
from smetric.bench.procs import BenchError, run_child
from smetric.bench.stacks import smetric_argv
from smetric.bench.sweep import KNEE_ATTAINMENT, Row

if TYPE_CHECKING:
    from smetric.bench.cli import Bench

SIM_RATES = (
    "0.5,1,2,3,4,6,8"  # multipliers of the simulator's base rate; its knee lies inside at 4-32 instances
)
SIM_WARMUP_S = 1200.0  # `smetric simulate --quick`'s window (20 + 20 simulated minutes)
SIM_MEASURE_S = 1200.0
SIM_TIMEOUT_S = 3600.0
SIM_STOP_GRACE_S = 30.0  # smetric simulate stops its pool: each worker ends its current run (seconds)


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n (1 = largest), ties get their average rank."""
    arr = -np.asarray(values, dtype=np.float64)
    order = np.argsort(arr, kind="stable")
    ranks = np.empty(len(arr), dtype=np.float64)
    i = 0
    while i < len(arr):
        j = i
        while j + 1 < len(arr) and arr[order[j + 1]] == arr[order[i]]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) != len(b) or len(a) < 2:
        return float("nan")
    ra, rb = average_ranks(a), average_ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def kendall_tau_b(a: Sequence[float], b: Sequence[float]) -> float:
    n = len(a)
    if n != len(b) or n < 2:
        return float("nan")
    concordant = discordant = ties_a = ties_b = 0
    for i in range(n):
        for j in range(i + 1, n):
            da, db = np.sign(a[i] - a[j]), np.sign(b[i] - b[j])
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif da == db:
                concordant += 1
            else:
                discordant += 1
    denom = math.sqrt((concordant + discordant + ties_a) * (concordant + discordant + ties_b))
    return (concordant - discordant) / denom if denom else float("nan")


def sim_scores(
    results: Sequence[Mapping[str, Any]], policies: Sequence[str]
) -> tuple[float, dict[str, float]]:
    """(the simulator's knee multiplier, policy -> peak TPS within SLO) from ``smetric simulate``'s rows.

    Peak = per seed the highest TPS within SLO over the rates, then the mean over
    seeds (the simulator's own summary statistic). The knee (first multiplier where the best
    policy's mean SLO attainment is below 90 %) is returned for information: with full-size
    prompts the best policy can miss 10 % already at the lowest rate, so ranking *at* the knee
    would rank an unloaded cluster.
    """
    by: dict[tuple[str, float], list[tuple[float, float, int]]] = {}
    for r in results:
        tps, att = r.get("tps_within_slo"), r.get("slo_attainment")
        if r.get("policy") in policies and isinstance(tps, int | float) and isinstance(att, int | float):
            seed = int(r.get("seed", 0) or 0)
            by.setdefault((str(r["policy"]), float(r["rate_multiplier"])), []).append(
                (float(tps), float(att), seed)
            )
    rates = sorted({m for _, m in by})
    if not rates:
        raise BenchError("smetric simulate returned no usable rows")

    def mean_att(p: str, m: float) -> float:
        vals = [v[1] for v in by.get((p, m), [])]
        return float(np.mean(vals)) if vals else float("nan")

    knee = next(
        (m for m in rates if not max((mean_att(p, m) for p in policies), default=0.0) >= KNEE_ATTAINMENT),
        rates[-1],
    )
    scores: dict[str, float] = {}
    for p in policies:
        peaks: dict[int, float] = {}
        for m in rates:
            for tps, _, seed in by.get((p, m), []):
                peaks[seed] = max(peaks.get(seed, -math.inf), tps)
        scores[p] = float(np.mean(list(peaks.values()))) if peaks else float("nan")
    return knee, scores


def run_simulator(argv: list[str], out: Path) -> list[dict[str, Any]]:
    """``smetric simulate ARGV --json OUT`` in a child (its output in ``OUT.log``); its rows. Stopped
    with :func:`~smetric.bench.procs.run_child` on a timeout or an interrupt (it then stops its
    pool's workers)."""
    cmd = [*smetric_argv("simulate"), *argv, "--json", str(out)]
    log = out.with_suffix(".log")
    rc = run_child(cmd, SIM_TIMEOUT_S, SIM_STOP_GRACE_S, output=log)
    if rc is None:
        raise BenchError(f"smetric simulate did not finish within {SIM_TIMEOUT_S:g} s")
    if rc != 0 or not out.is_file():
        tail = log.read_text(encoding="utf-8", errors="replace")[-400:] if log.is_file() else ""
        raise BenchError(f"smetric simulate failed ({rc}): {tail}")
    doc = json.loads(out.read_text())
    rows = doc.get("results")
    if not isinstance(rows, list):
        raise BenchError("smetric simulate wrote no results")
    return [r for r in rows if isinstance(r, dict)]


def compare_with_simulator(bench: Bench, rows: Sequence[Row], console: Console) -> dict[str, Any]:
    """Run the simulator as described above for a finished bench, print both rankings, return the
    JSON section (the simulator's own JSON is kept beside the bench's, ``<json>.sim.json``)."""
    rate = bench.knee if bench.knee is not None else max(r.rate for r in rows)
    runs = [run for run in bench.meta.get("runs", []) if run["rate"] == rate]
    n_families = len({r.family_id for r in bench.trace.requests})
    return compare_rows(
        rows, rate, bench.meta["trace"], bench.preset.instances, bench.args.preset, bench.preset.global_tier,
        list(bench.meta["seeds"]), runs[0]["families"] / n_families if runs else 1.0,
        bench.args.json.with_suffix(".sim.json"), console, bench.preset.arrivals,
        float(picker_timers(bench.preset.time_scale)["picker_refresh_model_s"]) * 1000.0,
    )  # fmt: skip


def compare_rows(
    rows: Sequence[Row],
    rate: float,
    trace: str,
    instances: int,
    preset: str,
    global_tier: str,
    seeds: Sequence[int],
    fraction: float,
    sim_json: Path,
    console: Console,
    arrivals: str = "agents",
    refresh_ms: float | None = None,
) -> dict[str, Any]:
    """``refresh_ms``: the simulator's scrape interval in model milliseconds (the bench's picker
    scrapes every 50 wall ms, ``refresh / time_scale`` model ms: the same staleness in both tools)."""
    policies = list(dict.fromkeys(r.policy for r in rows if r.router.startswith("envoy")))
    if len(policies) < 2:
        raise BenchError("needs at least two picker policies")
    bench_scores = {
        r.policy: r.mean("tps_within_slo") for r in rows if r.rate == rate and r.policy in policies
    }
    argv = ["--trace", trace, "--instances", str(instances), "--preset", preset, "--global-tier", global_tier,
            "--policies", ",".join(policies), "--rates", SIM_RATES, "--seeds", ",".join(map(str, seeds)),
            "--subsample", f"{min(1.0, fraction):.6g}", "--warmup-s", f"{SIM_WARMUP_S:g}",
            "--measure-s", f"{SIM_MEASURE_S:g}", "--no-extend-past-knee", "--arrivals", arrivals]  # fmt: skip
    if refresh_ms is not None:
        argv += ["--refresh-ms", f"{refresh_ms:g}"]
    console.print(f"compare-sim: smetric simulate {' '.join(argv)} --json {sim_json}")
    results = run_simulator(argv, sim_json)
    sim_knee, sim = sim_scores(results, policies)
    common = [p for p in policies if not math.isnan(bench_scores.get(p, math.nan)) and not math.isnan(sim[p])]
    a, b = [bench_scores[p] for p in common], [sim[p] for p in common]
    rho, tau = spearman(a, b), kendall_tau_b(a, b)
    bench_order = sorted(common, key=lambda p: -bench_scores[p])
    sim_order = sorted(common, key=lambda p: -sim[p])
    table = Table(title=f"bench vs simulator, {instances} instances: TPS within SLO")
    for head in ("rank", f"bench at its knee ({rate:g} families/model s)", "simulator, peak over its rates"):
        table.add_column(head)
    for i, (pb, ps) in enumerate(zip(bench_order, sim_order, strict=True)):
        table.add_row(str(i + 1), f"{pb} {bench_scores[pb]:.1f}", f"{ps} {sim[ps]:.1f}")
    console.print(table)
    console.print(
        f"rank correlation over {len(common)} policies: Spearman {rho:+.2f}, Kendall tau-b {tau:+.2f}"
    )
    return {
        "simulate_argv": argv,
        "sim_json": str(sim_json),
        "bench_rate": rate,
        "sim_knee_multiplier": sim_knee,
        "bench_tps_within_slo": bench_scores,
        "sim_peak_tps_within_slo": sim,
        "bench_order": bench_order,
        "sim_order": sim_order,
        "spearman": rho,
        "kendall_tau_b": tau,
        "note": "bench: mean TPS within SLO at its knee; simulator: mean over seeds of each seed's peak TPS "
        "within SLO over its rates; the simulator replays full-size prompts (no token scale), stationary "
        "arrivals, 20+20 min; vllm-router is not simulated",
    }
