"""smetric-tiered vs smetric vs the baselines, and its ablation rows, with seeds and paired CIs.

Every (variant, seed, rate) is one :func:`smetric.sim.simulator.simulate` run on the shared
agentic trace; a variant's peak is its highest TPS within SLO over the rate grid, per seed. The
paired margin of A over B is ``peak_A(seed) / peak_B(seed) - 1`` per seed, reported as its mean
and a 95 % t interval over the seeds (n = 3: t = 4.303).

Variants: the policies given, plus ``smetric-tiered -<mechanism>`` for each ablated mechanism
(that one switch off, the others on).

Example (the run in docs/policies.md, 16 instances, about 15 min on 2 cores)::

    python -m smetric.bench.evidence.tiered_ablation --instances 16 --rates 2.5,3,3.25,3.5 --seeds 0,1,2 \
        --json out/tiered.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from smetric.bench.evidence.inputs import check_output, check_trace, command
from smetric.bench.procs import process_pool
from smetric.core.presets import get_preset
from smetric.policy.tiered_params import MECHANISMS, TieredParams
from smetric.sim import simulator
from smetric.sim.simulator import SimConfig
from smetric.sim.simulator import simulate as _simulate
from smetric.sim.workload import PreparedWorkload, prepare
from smetric.trace import load_agentic

TRACE = Path(__file__).resolve().parents[4] / ".." / "shared" / "traces" / "claude-code-agentic.jsonl.gz"
BASE_FAMILIES_PER_S_PER_32 = 0.02  # smetric.sim.sweep's base rate
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
DEFAULT_POLICIES = "smetric-tiered,smetric,dynamo,lmetric,load-balance,llmd-slo"


@lru_cache(maxsize=1)
def _work(trace: str, preset: str) -> PreparedWorkload:
    return prepare(load_agentic(Path(trace), share_system_prompt=True), get_preset(preset))


def _variant(name: str, node_local_fetch_s_per_token: float | None = None) -> tuple[str, TieredParams]:
    """The policy and its ``tiered`` object; ``node_local_fetch_s_per_token``: the node-local
    load rate the operator configures where the cluster has one (``--global-placement node``)."""
    base = TieredParams(node_local_fetch_s_per_token=node_local_fetch_s_per_token)
    if " -" in name:
        policy, off = name.split(" -", 1)
        return policy, base.without(off)
    return name, base


def node_local_fetch_s_per_token(cfg: SimConfig, preset: str) -> float | None:
    """s/token of a same-node load in ``cfg``'s cluster (None unless its placement is ``node``)."""
    if cfg.global_placement != "node":
        return None
    p = get_preset(preset)
    return p.model.kv_bytes_per_token / (cfg.global_node_local_gbit_s * 1e9 / 8.0 * p.n_gpus)


def _run(args: tuple[str, str, SimConfig, str, int, float, float]) -> dict[str, object]:
    trace, preset, cfg, variant, seed, mult, base = args
    policy, tiered = _variant(variant, node_local_fetch_s_per_token(cfg, preset))
    tiers: list[object] = []
    build = simulator.build_cluster

    def spy(c: SimConfig, p: object, block_tokens: int) -> object:  # read the run's tier back
        cluster = build(c, p, block_tokens)  # type: ignore[arg-type]
        tiers.append(cluster[0].global_tier)
        return cluster

    simulator.build_cluster = spy  # type: ignore[assignment]
    try:
        r = _simulate(
            _work(trace, preset),
            policy,
            base * mult,
            replace(cfg, seed=seed).with_params(tiered=tiered.model_dump(by_alias=True)),
        )
    finally:
        simulator.build_cluster = build
    gt = tiers[-1] if tiers else None
    loaded = float(getattr(gt, "bytes_loaded", 0.0))
    node_local = float(getattr(gt, "bytes_loaded_node_local", 0.0))
    m = r.metrics
    return {
        "variant": variant,
        "seed": seed,
        "rate_multiplier": mult,
        "tps_within_slo": float(m["tps_within_slo"]),
        "slo_attainment": float(m["slo_attainment"]),
        "local_hit_ratio": float(m["local_hit_ratio"]),
        "global_hit_ratio": float(m["global_hit_ratio"]),
        "node_local_load_share": node_local / loaded if loaded > 0 else 0.0,
        "reasons": dict(r.reasons),
        "sim_wall_s": r.sim_wall_s,
    }


def ci95(xs: list[float]) -> tuple[float, float]:
    n = len(xs)
    mean = sum(xs) / n
    if n < 2:
        return mean, math.nan
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    return mean, T975.get(n - 1, 1.96) * sd / math.sqrt(n)


def summarise(rows: list[dict[str, object]], variants: list[str], seeds: list[int]) -> dict[str, object]:
    peak: dict[tuple[str, int], float] = {}
    knee: dict[tuple[str, int], float] = {}
    for r in rows:
        k = (str(r["variant"]), int(r["seed"]))  # type: ignore[call-overload]
        tps = float(r["tps_within_slo"])  # type: ignore[arg-type]
        if tps > peak.get(k, -1.0):
            peak[k], knee[k] = tps, float(r["rate_multiplier"])  # type: ignore[arg-type]
    out: dict[str, object] = {}
    for v in variants:
        ps = [peak[(v, s)] for s in seeds]
        mean, half = ci95(ps)
        out[v] = {
            "peak_tps_within_slo": ps,
            "mean": mean,
            "ci95": half,
            "knee": [knee[(v, s)] for s in seeds],
        }
    margins: dict[str, dict[str, float]] = {}
    for a in variants:
        for b in variants:
            if a == b:
                continue
            rel = [peak[(a, s)] / peak[(b, s)] - 1.0 if peak[(b, s)] > 0 else math.nan for s in seeds]
            mean, half = ci95(rel)
            margins[f"{a} vs {b}"] = {"mean": mean, "ci95": half, "per_seed": rel}  # type: ignore[dict-item]
    return {"peaks": out, "margins": margins}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default=str(TRACE.resolve()))
    p.add_argument("--preset", default="qwen3-30b-h20")
    p.add_argument("--instances", type=int, default=16)
    p.add_argument("--rates", default="4,5,6,7,8", help="multipliers of the base rate")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--policies", default=DEFAULT_POLICIES)
    p.add_argument("--ablate", default=",".join(MECHANISMS), help="mechanisms to switch off one at a time")
    p.add_argument("--global-tier", default="full")
    p.add_argument(
        "--global-placement",
        default="spread",
        choices=("spread", "node"),
        help="node: replicas in the writer node's segment, same-node loads over PCIe (docs/simulator.md)",
    )
    p.add_argument("--warmup-s", type=float, default=3600.0)
    p.add_argument("--measure-s", type=float, default=3600.0)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    if a.json is not None:  # before any run: the results must have somewhere to go
        check_output("--json", a.json)
    check_trace(a.trace)
    rates = [float(x) for x in a.rates.split(",") if x.strip()]
    seeds = [int(x) for x in a.seeds.split(",") if x.strip()]
    variants = [x.strip() for x in a.policies.split(",") if x.strip()]
    variants += [f"smetric-tiered -{m.strip()}" for m in a.ablate.split(",") if m.strip()]
    cfg = SimConfig(
        instances=a.instances,
        global_tier=a.global_tier,
        warmup_s=a.warmup_s,
        measure_s=a.measure_s,
        global_placement=a.global_placement,
    )
    base = BASE_FAMILIES_PER_S_PER_32 * a.instances / 32.0
    tasks = [
        (a.trace, a.preset, cfg, v, s, m, base)
        for m in sorted(rates, reverse=True)
        for v in variants
        for s in seeds
    ]
    t0 = time.perf_counter()
    rows: list[dict[str, object]] = []
    with process_pool(max(1, a.workers)) as pool:  # SIGTERM / Ctrl-C: the workers stop at once
        for r in pool.map(_run, tasks):
            rows.append(r)
            print(
                f"{r['variant']:<32} seed {r['seed']} x{r['rate_multiplier']:<4} tps@slo {r['tps_within_slo']:8.1f}",
                file=sys.stderr,
            )
    summary = summarise(rows, variants, seeds)
    wall = time.perf_counter() - t0
    peaks = summary["peaks"]
    assert isinstance(peaks, dict)
    best_base = max(
        (v for v in variants if not v.startswith("smetric")), key=lambda v: peaks[v]["mean"], default=None
    )
    print(f"\n{'variant':<32} {'peak TPS@SLO mean ± CI95':>26}  per seed            knee x")
    for v in variants:
        s = peaks[v]
        print(
            f"{v:<32} {s['mean']:10.1f} ± {s['ci95']:6.1f}       {', '.join(f'{x:.0f}' for x in s['peak_tps_within_slo'])}   {s['knee']}"
        )
    margins = summary["margins"]
    assert isinstance(margins, dict)
    for ref in ("smetric", best_base):
        if ref is None or ref not in variants:
            continue
        for v in variants:
            if v != ref and v.startswith("smetric-tiered"):
                mg = margins[f"{v} vs {ref}"]
                print(f"margin {v} over {ref}: {100 * mg['mean']:+.1f} % ± {100 * mg['ci95']:.1f}")
    print(f"(best baseline by mean peak: {best_base}; {len(rows)} runs in {wall:.0f} s)")
    if a.json is not None:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(
            json.dumps(
                {
                    "config": {**vars(a), "json": str(a.json), "sim": repr(cfg), "best_baseline": best_base},
                    "rows": rows,
                    **summary,
                    "wall_s": wall,
                },
                indent=1,
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(command(main, None, "python -m smetric.bench.evidence.tiered_ablation"))
