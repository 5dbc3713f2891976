"""``smetric simulate``: trace-driven simulation of routing policies on a simulated cluster.

Example (the quick preset: a seeded quarter of the session families, 8 instances, 3 rates, 20+20 simulated minutes)::

    smetric simulate --quick --json out/quick.json --plot out/quick.png
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from smetric.core.names import MODES, POLICY_NAMES
from smetric.core.presets import GPUS, KV_DTYPES, PRESETS, get_preset
from smetric.engine.global_tier import GLOBAL_TIER_KINDS, LOAD_MODES
from smetric.policy import known_policies
from smetric.sim.report import plot, results_table
from smetric.sim.simulator import RunResult, SimConfig
from smetric.sim.sweep import BASE_FAMILIES_PER_S_PER_32, SweepSpec, WorkloadSpec, prepared, run_sweep
from smetric.sim.workload import max_request_tokens

TRACE_FILE = "claude-code-agentic.jsonl.gz"
# --quick: a seeded quarter of the families, 8 instances, 20 + 20 simulated minutes, 3 rates
QUICK_INSTANCES = 8
QUICK_RATES = "2,8,16"
QUICK_SUBSAMPLE = 0.25
QUICK_WARMUP_S = 1200.0
QUICK_MEASURE_S = 1200.0


def default_trace() -> Path:
    env = os.environ.get("SMETRIC_TRACES")
    if env:
        return Path(env) / TRACE_FILE
    repo = Path(__file__).resolve().parents[3]
    return (repo / ".." / "shared" / "traces" / TRACE_FILE).resolve()


def _floats(text: str, what: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{what} must be comma-separated numbers, got {text!r}") from None
    if not vals or any(not (math.isfinite(v) and v > 0) for v in vals):
        raise ValueError(f"{what} must be positive numbers, got {text!r}")
    return vals


def _finite(x: object) -> object:
    """JSON has no NaN/inf: undefined metrics (e.g. TPOT in disaggregated mode) become null."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="smetric simulate", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--trace",
        type=Path,
        default=None,
        help=f"trace file (default: $SMETRIC_TRACES/{TRACE_FILE} or ../shared/traces/)",
    )
    p.add_argument(
        "--instances", type=int, default=None, help="instances in the cluster (default 32; quick 8)"
    )
    p.add_argument("--mode", choices=MODES, default="colocated")
    p.add_argument("--policies", default="all", help=f"comma-separated, or 'all' ({', '.join(POLICY_NAMES)})")
    p.add_argument(
        "--rates", default=None, help="rate multipliers of the base rate (default 1,2,4,6,8,10; quick 2,8,16)"
    )
    p.add_argument(
        "--base-rate",
        type=float,
        default=BASE_FAMILIES_PER_S_PER_32,
        help="base rate in session families/s for 32 instances, scaled by instances/32 (default %(default)s)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--global-tier", choices=GLOBAL_TIER_KINDS, default="full")
    p.add_argument(
        "--nic-gbit-s", type=float, default=200.0, help="per-node NIC bandwidth for global-tier loads"
    )
    g = p.add_argument_group("global tier path (defaults: LMCache + Mooncake as measured; docs/simulator.md)")
    g.add_argument(
        "--global-load-gbit-s",
        type=float,
        default=60.0,
        help="per-GPU load throughput LMCache+Mooncake achieve, Gb/s (default 60 = 7.5 GB/s; "
        "0 = no per-GPU limit, i.e. NIC line rate)",
    )
    g.add_argument(
        "--global-store-gbit-s",
        type=float,
        default=200.0,
        help="source-side bandwidth per store node, Gb/s, shared by all readers and writers (0 = unlimited)",
    )
    g.add_argument("--global-lookup-ms", type=float, default=2.0, help="lookup latency per admitted request")
    g.add_argument(
        "--global-load-mode",
        choices=LOAD_MODES,
        default="sync",
        help="sync: a load stalls the instance's whole batch (LMCache's vLLM connector); async: only the request",
    )
    g.add_argument(
        "--no-global-write-back",
        action="store_true",
        help="do not charge the write-back of computed KV to the links",
    )
    p.add_argument("--preset", choices=sorted(PRESETS), default="qwen3-30b-h20")
    d = p.add_argument_group("deployment variant of the preset")
    d.add_argument(
        "--kv-dtype", choices=sorted(KV_DTYPES), default="bf16", help="KV cache dtype (vLLM --kv-cache-dtype)"
    )
    d.add_argument(
        "--tp", type=int, default=None, help="tensor-parallel GPUs per instance (default: the preset's)"
    )
    d.add_argument("--gpu", choices=sorted(GPUS), default=None, help="GPU kind (default: the preset's)")
    d.add_argument("--hbm-gb", type=float, default=None, help="HBM per GPU in GB (keeps the GPU's compute)")
    d.add_argument(
        "--max-context",
        type=int,
        default=None,
        help="model context limit in tokens (default: the model's; 1048576 = Qwen3-Coder with YaRN)",
    )
    p.add_argument("--slack", type=float, default=1.0, help="SMetric SLACK")
    p.add_argument("--hit-ratio", type=float, default=0.5, help="SMetric HIT_RATIO")
    p.add_argument(
        "--local-only-slo-check",
        action="store_true",
        help="SMetric's SLO check counts local hits only (algorithms.md literally); default credits the "
        "global tier's copy of the session at NIC bandwidth when a tier exists",
    )
    p.add_argument("--refresh-ms", type=float, default=50.0, help="router metrics scrape interval")
    p.add_argument(
        "--warmup-s",
        type=float,
        default=None,
        help="simulated seconds before the measurement window (default 3600)",
    )
    p.add_argument(
        "--measure-s", type=float, default=None, help="length of the measurement window (default 3600)"
    )
    p.add_argument(
        "--subsample", type=float, default=None, help="keep this fraction of session families (seeded)"
    )
    p.add_argument(
        "--no-shared-system-prompt",
        action="store_true",
        help="keep each family's system-prompt blocks unique (default: one shared id sequence per model)",
    )
    p.add_argument("--workers", type=int, default=None, help="parallel processes (default: all cores)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="quick preset: 8 instances, 1/4 of the families, rates 2,8,16, 20+20 simulated min",
    )
    p.add_argument("--json", type=Path, default=None, help="write results as JSON")
    p.add_argument("--plot", type=Path, default=None, help="write a PNG figure")
    return p


def _spec(a: argparse.Namespace) -> SweepSpec:
    quick = a.quick
    policies = (
        known_policies()
        if a.policies == "all"
        else tuple(x.strip() for x in a.policies.split(",") if x.strip())
    )
    unknown = [x for x in policies if x not in known_policies()]
    if unknown:
        raise ValueError(f"unknown policies {unknown}; known: {', '.join(known_policies())}")
    rates = _floats(a.rates or (QUICK_RATES if quick else "1,2,4,6,8,10"), "--rates")
    sim = SimConfig(
        instances=a.instances or (QUICK_INSTANCES if quick else 32),
        mode=a.mode,
        preset=a.preset,
        global_tier=a.global_tier,
        refresh_s=a.refresh_ms / 1e3,
        slack=a.slack,
        hit_ratio=a.hit_ratio,
        nic_gbit_s=a.nic_gbit_s,
        global_load_gbit_s=a.global_load_gbit_s or None,
        global_store_gbit_s=a.global_store_gbit_s or None,
        global_lookup_s=a.global_lookup_ms / 1e3,
        global_write_back=not a.no_global_write_back,
        global_load_mode=a.global_load_mode,
        kv_dtype=a.kv_dtype,
        tp=a.tp,
        gpu=a.gpu,
        hbm_gb=a.hbm_gb,
        max_context=a.max_context,
        global_aware_slo=not a.local_only_slo_check,
        warmup_s=a.warmup_s if a.warmup_s is not None else (QUICK_WARMUP_S if quick else 3600.0),
        measure_s=a.measure_s if a.measure_s is not None else (QUICK_MEASURE_S if quick else 3600.0),
        seed=a.seed,
    )
    subsample = a.subsample if a.subsample is not None else (QUICK_SUBSAMPLE if quick else None)
    if a.base_rate <= 0 or not math.isfinite(a.base_rate):
        raise ValueError("--base-rate must be a positive number")
    trace = a.trace or default_trace()
    work = WorkloadSpec(str(trace), sim.preset_name, not a.no_shared_system_prompt, subsample, a.seed)
    return SweepSpec(work, sim, policies, rates, a.base_rate)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    console = Console(stderr=True)
    try:
        spec = _spec(args)
        work = prepared(spec.workload)
    except (ValueError, FileNotFoundError) as exc:
        console.print(f"[red]smetric simulate: {exc}[/red]")
        return 2
    sim = spec.sim
    console.print(
        f"trace {work.trace_name}: {len(work)} requests, {work.n_families} families, "
        f"{work.n_dropped} over the {work.max_tokens}-token limit (dropped); {sim.instances} x {sim.preset_name}, "
        f"{sim.mode}, global tier {sim.global_tier}; base rate {spec.base_families_per_s:.4f} families/s"
    )
    results: list[RunResult] = []
    with Progress(
        TextColumn("[bold]simulate"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
        transient=False,
    ) as prog:
        task = prog.add_task("", total=len(spec.policies) * len(spec.multipliers))

        def done(r: RunResult) -> None:
            results.append(r)
            prog.update(
                task, advance=1, description=f"{r.policy} @ {r.rate_multiplier:g}x ({r.sim_wall_s:.1f} s)"
            )

        ordered = run_sweep(spec, args.workers, done)
    rows = [r.to_dict() for r in ordered]
    title = (
        f"{work.trace_name}: {sim.instances} x {sim.preset_name}, {sim.mode}, global tier {sim.global_tier}, "
        f"base {spec.base_families_per_s:.4f} families/s"
    )
    out = Console()
    if not out.is_terminal:
        out = Console(width=170)
    out.print(results_table(rows, sim.mode, title))
    doc = {
        "config": {
            "trace": spec.workload.trace_path,
            "shared_system_prompt": spec.workload.share_system_prompt,
            "subsample": spec.workload.subsample,
            "instances": sim.instances,
            "mode": sim.mode,
            "preset": sim.preset,
            "global_tier": sim.global_tier,
            "nic_gbit_s": sim.nic_gbit_s,
            "global_load_gbit_s": sim.global_load_gbit_s,
            "global_store_gbit_s": sim.global_store_gbit_s,
            "global_lookup_s": sim.global_lookup_s,
            "global_write_back": sim.global_write_back,
            "global_load_mode": sim.global_load_mode,
            "preset_variant": sim.preset_name,
            "kv_dtype": sim.kv_dtype,
            "tp": get_preset(sim.preset_name).n_gpus,
            "hbm_gb_per_gpu": get_preset(sim.preset_name).gpu.hbm_gb,
            "slack": sim.slack,
            "hit_ratio": sim.hit_ratio,
            "global_aware_slo": sim.global_aware_slo,
            "refresh_s": sim.refresh_s,
            "warmup_s": sim.warmup_s,
            "measure_s": sim.measure_s,
            "seed": sim.seed,
            "base_families_per_s": spec.base_families_per_s,
            "base_families_per_s_per_32_instances": spec.base_families_per_s_per_32,
            "max_request_tokens": max_request_tokens(get_preset(sim.preset_name)),
            "decode_simulated": sim.mode == "colocated",
        },
        "trace": {
            "name": work.trace_name,
            "requests": len(work),
            "families": work.n_families,
            "requests_over_limit_dropped": work.n_dropped,
            "notes": list(work.notes),
        },
        "results": rows,
    }
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(_finite(doc), indent=1, allow_nan=False))
        console.print(f"wrote {args.json}")
    if args.plot is not None:
        plot(rows, sim.mode, args.plot, title)
        console.print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
