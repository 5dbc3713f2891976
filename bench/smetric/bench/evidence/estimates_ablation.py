"""SMetric's estimate forms side by side: paired TPS within SLO per rate and at the peak.

Each variant is a policy with a set of policy-owned parameters (the YAML keys of its
``Params``); every (mode, variant, seed, rate) is one :func:`smetric.sim.simulator.simulate`
run on the shared agentic trace with the same seeds, so differences are paired per seed. The
headline metric is TPS within SLO colocated and prefill TPS within the TTFT SLO disaggregated
(as ``smetric simulate``). Margins of A over B are ``A(seed) / B(seed) - 1`` per seed, reported
as the mean and a 95 % t interval (:func:`smetric.sim.stats.mean_ci95`).

Variants (``--variants``, comma-separated names of :data:`VARIANTS` or plain policy names):

* ``tier``: smetric's defaults (tier-aware balance score and ``meets``, queued fetch, stick when
  nobody meets);
* ``tier-argmin``: the same, least balance score when nobody meets;
* ``no-qf``: tier estimates without the queued fetch seconds;
* ``session``: the balance score subtracts the local hit, ``meets`` credits ``max(c, est_hit)``
  (smetric before the tier estimate);
* ``local``: algorithms.md literally (local hits only in both).

Any name may end in ``@sync`` or ``@async`` (that run's global-tier load mode); ``--load-modes
sync,async`` runs every variant both ways and adds each variant's paired margin async vs sync.

Example (the run in docs/policies.md)::

    python -m smetric.bench.evidence.estimates_ablation --modes disaggregated,colocated --instances 16 \\
        --rates 3,4 --seeds 0,1,2 --json out/estimates.json
    # the load model both ways (docs/simulator.md, "Load mode")
    python -m smetric.bench.evidence.estimates_ablation --variants tier,llmd-slo,lmetric --load-modes sync,async \\
        --rates 2,3,4,5 --json out/load_modes.json
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
from typing import Any

from smetric.bench.evidence.inputs import check_output, check_trace, command
from smetric.bench.procs import process_pool
from smetric.core.presets import get_preset
from smetric.sim.simulator import SimConfig, simulate
from smetric.sim.stats import mean_ci95
from smetric.sim.sweep import BASE_FAMILIES_PER_S_PER_32
from smetric.sim.workload import PreparedWorkload, prepare
from smetric.trace import load_agentic

TRACE = Path(__file__).resolve().parents[4] / ".." / "shared" / "traces" / "claude-code-agentic.jsonl.gz"

# The estimate forms run with nobodyMeets: stick, so the table of commit a6a9167 reproduces
# (`git show 13b99e2:docs/policies.md`); "tier-ll" is the default's form (least-loaded).
_STICK: dict[str, object] = {"nobodyMeets": "stick"}
VARIANTS: dict[str, tuple[str, dict[str, object]]] = {
    "tier": ("smetric", {**_STICK}),
    "tier-argmin": ("smetric", {"nobodyMeets": "argmin"}),
    "tier-ll": ("smetric", {"nobodyMeets": "least-loaded"}),
    "no-qf": ("smetric", {**_STICK, "queuedFetch": False}),
    "session": (
        "smetric",
        {**_STICK, "balanceEstimate": "local", "meetsEstimate": "session", "queuedFetch": False},
    ),
    "local": (
        "smetric",
        {**_STICK, "balanceEstimate": "local", "meetsEstimate": "local", "queuedFetch": False},
    ),
}


@lru_cache(maxsize=1)
def _work(trace: str, preset: str) -> PreparedWorkload:
    return prepare(load_agentic(Path(trace), share_system_prompt=True), get_preset(preset))


def variant(name: str) -> tuple[str, dict[str, object], str | None]:
    """``(policy, parameters, load mode)`` of a variant name: one of :data:`VARIANTS` or a policy
    name (its defaults), optionally suffixed ``@sync`` / ``@async`` (the global-tier load mode
    of that run; none = the run's ``--global-load-mode``)."""
    base, _, load_mode = name.partition("@")
    policy, params = VARIANTS.get(base, (base, {}))
    return policy, params, load_mode or None


def _run(task: tuple[str, str, SimConfig, str, int, float, float]) -> dict[str, Any]:
    trace, preset, cfg, name, seed, mult, families_per_s = task
    policy, params, load_mode = variant(name)
    cfg = replace(cfg, seed=seed, global_load_mode=load_mode or cfg.global_load_mode)
    r = simulate(_work(trace, preset), policy, families_per_s, cfg.with_params(**params))
    m = r.metrics
    key = "tps_within_slo" if cfg.mode == "colocated" else "prefill_tps_within_slo"
    return {
        "mode": cfg.mode,
        "variant": name,
        "seed": seed,
        "rate_multiplier": mult,
        "families_per_s": families_per_s,
        "tps": float(m[key]),
        "slo_attainment": float(m["slo_attainment"]),
        "arrival_drift": float(m.get("arrival_drift", math.nan)),
        "reasons": dict(r.reasons),
        "sim_wall_s": r.sim_wall_s,
    }


def paired(a: list[float], b: list[float]) -> dict[str, Any]:
    rel = [x / y - 1.0 if y > 0 else math.nan for x, y in zip(a, b, strict=True)]
    mean, ci = mean_ci95([x for x in rel if math.isfinite(x)])
    return {"mean": mean, "ci95": ci, "per_seed": rel}


def summarise(
    rows: list[dict[str, Any]], variants: list[str], seeds: list[int], pairs: list[tuple[str, str]]
) -> dict[str, Any]:
    """Per mode: each variant's TPS per rate and peak (per seed), and the paired margin of ``a``
    over ``b`` for each ``(a, b)`` in ``pairs``."""
    out: dict[str, Any] = {}
    for mode in sorted({r["mode"] for r in rows}):
        tps = {(r["variant"], r["seed"], r["rate_multiplier"]): r["tps"] for r in rows if r["mode"] == mode}
        rates = sorted({k[2] for k in tps})
        per: dict[str, Any] = {}
        for v in variants:
            peak = [max(tps[(v, s, f)] for f in rates) for s in seeds]
            per[v] = {
                "per_rate": {f: [tps[(v, s, f)] for s in seeds] for f in rates},
                "peak": peak,
                "peak_mean_ci": mean_ci95(peak),
            }
        margins: dict[str, Any] = {}
        for v, ref in pairs:
            m = {f"{f:g}x": paired(per[v]["per_rate"][f], per[ref]["per_rate"][f]) for f in rates}
            m["peak"] = paired(per[v]["peak"], per[ref]["peak"])
            margins[f"{v} vs {ref}"] = m
        out[mode] = {"variants": per, "margins": margins}
    return out


def _fmt(m: dict[str, Any]) -> str:
    ci = m["ci95"]
    inner = f"[{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]" if ci else "[n/a]"
    return f"{100 * m['mean']:+6.1f} % {inner}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default=str(TRACE.resolve()))
    p.add_argument("--preset", default="qwen3-30b-h20")
    p.add_argument("--modes", default="disaggregated,colocated")
    p.add_argument("--instances", type=int, default=16)
    p.add_argument("--rates", default="3,4", help="multipliers of the base rate")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--variants", default="tier,tier-argmin,no-qf,session,local")
    p.add_argument("--reference", default="tier", help="the variant the margins are against")
    p.add_argument("--global-tier", default="full")
    p.add_argument("--global-load-mode", default="sync", choices=("sync", "async"))
    p.add_argument(
        "--load-modes",
        default="",
        help="comma-separated load modes to run every variant under (e.g. sync,async): variants "
        "become NAME@MODE and each gets its paired margin of every mode over the first",
    )
    p.add_argument("--warmup-s", type=float, default=1200.0)
    p.add_argument("--measure-s", type=float, default=1200.0)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    if a.json is not None:  # before any run: the results must have somewhere to go
        check_output("--json", a.json)
    check_trace(a.trace)
    rates = [float(x) for x in a.rates.split(",") if x.strip()]
    seeds = [int(x) for x in a.seeds.split(",") if x.strip()]
    variants = [x.strip() for x in a.variants.split(",") if x.strip()]
    if a.reference not in variants:
        p.error(f"--reference {a.reference!r} is not among --variants")
    pairs = [(v, a.reference) for v in variants if v != a.reference]
    load_modes = [x.strip() for x in a.load_modes.split(",") if x.strip()]
    if any(m not in ("sync", "async") for m in load_modes):
        p.error(f"--load-modes must name sync and/or async, got {a.load_modes!r}")
    if load_modes:
        first = load_modes[0]
        pairs = [(f"{v}@{first}", f"{r}@{first}") for v, r in pairs]
        pairs += [(f"{v}@{m}", f"{v}@{first}") for v in variants for m in load_modes[1:]]
        variants = [f"{v}@{m}" for v in variants for m in load_modes]
    base = BASE_FAMILIES_PER_S_PER_32 * a.instances / 32.0
    tasks = []
    for mode in (x.strip() for x in a.modes.split(",") if x.strip()):
        cfg = SimConfig(
            instances=a.instances,
            mode=mode,
            global_tier=a.global_tier,
            global_load_mode=a.global_load_mode,
            warmup_s=a.warmup_s,
            measure_s=a.measure_s,
        )
        tasks += [(a.trace, a.preset, cfg, v, s, m, base * m) for m in rates for v in variants for s in seeds]
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    with process_pool(max(1, a.workers)) as pool:  # SIGTERM / Ctrl-C: the workers stop at once
        for r in pool.map(_run, tasks):
            rows.append(r)
            print(
                f"{r['mode']:<13} {r['variant']:<18} seed {r['seed']} {r['rate_multiplier']:g}x "
                f"tps {r['tps']:10.1f} drift {r['arrival_drift']:+.2f}",
                file=sys.stderr,
            )
    summary = summarise(rows, variants, seeds, pairs)
    for mode, s in summary.items():
        print(f"\n{mode} ({a.instances} instances, {a.global_tier} tier, {a.global_load_mode} loads)")
        for v, d in s["variants"].items():
            rate_means = "  ".join(f"{f:g}x {sum(x) / len(x):9.0f}" for f, x in d["per_rate"].items())
            mean, ci = d["peak_mean_ci"]
            half = f"± {(ci[1] - ci[0]) / 2:.0f}" if ci else ""
            print(f"  {v:<20} {rate_means}   peak {mean:9.0f} {half}")
        for k, m in s["margins"].items():
            print(f"  {k}: " + "; ".join(f"{name} {_fmt(x)}" for name, x in m.items()))
    wall = time.perf_counter() - t0
    print(f"\n{len(rows)} runs in {wall:.0f} s", file=sys.stderr)
    if a.json is not None:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {"args": vars(a) | {"json": str(a.json)}, "rows": rows, "summary": summary, "wall_s": wall}
        a.json.write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(command(main, None, "python -m smetric.bench.evidence.estimates_ablation"))
