"""``smetric simulate``: trace-driven simulation of routing policies on a simulated cluster.

Example (the quick preset: a seeded quarter of the session families, 8 instances, four policies at
four rates around the knee, 3 seeds, 20+20 simulated minutes; the plot's headline figure is
``out/quick-tps.png``)::

    smetric simulate --quick --json out/quick.json --plot out/quick.png

Seeds (default 0,1,2) give each policy's peak with a 95 % CI and paired margins; ``--regime-map``
runs the regime map (:mod:`smetric.sim.regimes`); ``--cluster ADDRESS|local:N`` runs on Dask
(:mod:`smetric.sim.cluster`); ``--json OUT`` streams runs to ``OUT.runs.jsonl`` and ``--resume``
skips the runs found there.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from smetric.core.argparsing import OneLineErrors
from smetric.core.names import MODES
from smetric.core.outputs import check_writable
from smetric.core.presets import GPUS, KV_DTYPES, PRESETS
from smetric.core.stopping import Terminated, interrupt_exit_code, sigterm_raises_interrupt
from smetric.policy.registry import REGISTRY, Registry
from smetric.sim import regimes as rg
from smetric.sim.config import ARRIVALS, SimConfig
from smetric.sim.driver import run_and_write
from smetric.sim.param_flags import flow_control_json, policy_parameters
from smetric.sim.stream import read_rows, sidecar_path
from smetric.sim.sweep import (
    BASE_FAMILIES_PER_S_PER_32,
    KNEE_DROP,
    MAX_EXTENSIONS,
    Setting,
    SweepSpec,
    WorkloadSpec,
)
from smetric.sim.tier_flags import global_tier_flags

TRACE_FILE = "claude-code-agentic.jsonl.gz"
# --quick: a seeded quarter of the families, 8 instances, 20 + 20 simulated minutes, the four
# strongest policies of docs/evidence.md at four rates around this cluster's knee (~3x)
QUICK_INSTANCES = 8
QUICK_RATES = "2,3,4,6"
QUICK_POLICIES = "smetric,lmetric,llmd-slo,dynamo"
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


def _workload_flags(p: argparse.ArgumentParser, registry: Registry) -> None:
    """The trace, the cluster's size and mode, the policies, rates, seeds and arrivals."""
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
    p.add_argument(
        "--policies",
        default=None,
        help=f"comma-separated, or 'all' ({', '.join(registry.names)}); default all (quick "
        f"{QUICK_POLICIES}), or the policy of --policy-config",
    )
    p.set_defaults(known_policies=registry.names, registry=registry)
    p.add_argument(
        "--rates",
        default=None,
        help=f"rate multipliers of the base rate (default 1,2,4,6,8,10; quick {QUICK_RATES})",
    )
    p.add_argument(
        "--base-rate",
        type=float,
        default=BASE_FAMILIES_PER_S_PER_32,
        help="base rate in session families/s for 32 instances, scaled by instances/32 (default %(default)s)",
    )
    p.add_argument(
        "--seeds",
        default="0,1,2",
        help="comma-separated seeds (arrivals, policy tie-breaks); >= 3 for a CI (default %(default)s)",
    )
    p.add_argument("--seed", type=int, default=None, help="one seed only (same as --seeds N)")
    p.add_argument(
        "--arrivals",
        choices=ARRIVALS,
        default="agents",
        help="agents: round(rate x mean family duration) concurrent agents, in steady state from t=0, "
        "each starting a new family when its last ends (the load cannot outgrow them past the knee); "
        "stationary: Poisson family starts, also before t=0; cold: Poisson starts at t>=0 only "
        "(the rate climbs ~26%% over a 1 h window) -- docs/simulator.md",
    )
    p.add_argument(
        "--no-extend-past-knee",
        action="store_true",
        help=f"do not add rates past each policy's knee (default: until TPS@SLO is >= {100 * KNEE_DROP:.0f}%% "
        f"below the peak, at most {MAX_EXTENSIONS} extra rates)",
    )


def _preset_flags(p: argparse.ArgumentParser) -> None:
    """The model/GPU preset and its deployment variant."""
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


def _policy_flags(p: argparse.ArgumentParser) -> None:
    """The policies' parameters: the picker's config file, --slack, --hit-ratio, --param."""
    p.add_argument(
        "--policy-config",
        type=Path,
        default=None,
        metavar="FILE",
        help="the picker's config file (smetric-epp --config, the operator's ConfigMap): its policy's "
        "parameters (policy-owned keys; the simulated cluster sets mode, SLO, cost model and block "
        "size) and, without --policies, its policy",
    )
    p.add_argument("--slack", type=float, default=None, help="SMetric SLACK (default: the policy's)")
    p.add_argument("--hit-ratio", type=float, default=None, help="SMetric HIT_RATIO (default: the policy's)")
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME.KEY=VALUE",
        help="any policy's own parameter, repeatable: NAME a policy, KEY a key of its Params model "
        "(nested: smetric-tiered.tiered.footprint=false), VALUE a YAML scalar; applied after "
        "--policy-config, --slack and --hit-ratio; one flat mapping as in the picker's config "
        "(docs/policies.md lists the keys)",
    )
    p.add_argument(
        "--local-only-slo-check",
        action="store_true",
        help="SMetric's SLO check counts local hits only (algorithms.md literally); default credits the "
        "global tier's copy of the session at NIC bandwidth when a tier exists",
    )
    p.add_argument(
        "--tiered-off",
        default="",
        help="smetric-tiered ablation: comma-separated mechanisms to switch off "
        "(global, migration, node-local, footprint); other policies ignore it",
    )


def _router_flags(p: argparse.ArgumentParser) -> None:
    """The router's view of the cluster, flow control and the ledger."""
    p.add_argument("--refresh-ms", type=float, default=50.0, help="router metrics scrape interval")
    p.add_argument(
        "--router-view",
        choices=("deployed", "oracle"),
        default="deployed",
        help="deployed: the picker's router core (cost model fitted from profiled prefills, prefill "
        "rates learned online); oracle: the engine's cost model, speed 1.0 (docs/simulator.md)",
    )
    p.add_argument(
        "--tier-hits",
        choices=("estimate", "events", "exact"),
        default="estimate",
        help="policies that read the tier (smetric, smetric-tiered, X+pieces): g from the picker's "
        "write estimate (an LRU of the routed prompts' whole chunks, the tier's size: what the operator's "
        "deployment gives the picker), from the tier's store events without removals (events: LMCache "
        "publishes no removals), or from the simulated tier's exact content (exact: an oracle, ablations)",
    )
    p.add_argument(
        "--framework-g",
        choices=("tier", "session"),
        default="tier",
        help="the global-tier hit g the framework (the flow gate's TTFT estimate, the dispatch ledger's "
        "charge) reads for a policy whose rule does not read the tier (the baselines as shipped): tier = "
        "the same tier model as SMetric's (--tier-hits; default since 6 Dec 2026), session = the session's "
        "previous turn, as every run before (docs/overload.md, section 8e)",
    )
    p.add_argument(
        "--flow-control",
        action="store_true",
        help="SLO-aware flow control at the gateway for every policy: hold a request no instance "
        "can serve within its SLO in a bounded fair queue, shed with 429 + Retry-After what can "
        "no longer make it; clients retry (docs/overload.md)",
    )
    p.add_argument(
        "--fc",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a flow-control setting (max_queued, ttl_s, shed_on_deadline, retry_after_s, slack, "
        "idle_queued_tokens, max_engine_waiting, kv_headroom, late_last, tpot_guard, filter_candidates, "
        "hopeless_last; the ablations cold_last, cold_hit_share, session_budget, session_idle_s, "
        "session_kv_share, session_miss_share, session_window (docs/overload.md, 8g); clients: max_retries, jitter, sessions_wait), repeatable; implies "
        "--flow-control",
    )
    p.add_argument(
        "--legacy-ledger",
        action="store_true",
        help="reproduce the pre-fix ledger charge cost(L - local hit) even when the global tier supplies "
        "the tokens (phantom queued work; for comparison only)",
    )


def _window_flags(p: argparse.ArgumentParser) -> None:
    """The simulated window and the workload's families."""
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


def _run_flags(p: argparse.ArgumentParser) -> None:
    """Where and how the runs execute, the regime map, --quick and the outputs."""
    p.add_argument("--workers", type=int, default=None, help="parallel processes (default: all cores)")
    p.add_argument(
        "--cluster",
        default=None,
        metavar="ADDRESS",
        help="run on a Dask cluster: scheduler address (tcp://host:8786) or local:N for a throwaway "
        "local cluster of N workers (needs the [cluster] extra)",
    )
    p.add_argument(
        "--resume", action="store_true", help="skip runs already in the --json sidecar (OUT.runs.jsonl)"
    )
    m = p.add_argument_group("regime map (docs/simulator.md)")
    m.add_argument(
        "--regime-map",
        action="store_true",
        help=f"peak TPS@SLO of every policy and SMetric's paired margin over the best baseline across "
        f"regimes (default {rg.MAP_INSTANCES} instances, rates {rg.MAP_RATES}, "
        f"{rg.MAP_WARMUP_S:g}+{rg.MAP_MEASURE_S:g} s)",
    )
    m.add_argument(
        "--regimes", default=None, help=f"subset of regimes ({', '.join(r.name for r in rg.DEFAULT_REGIMES)})"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"quick preset (~20 s on 2 cores): {QUICK_INSTANCES} instances, 1/4 of the families, policies "
        f"{QUICK_POLICIES}, rates {QUICK_RATES} (around the knee), 3 seeds, 20+20 simulated min",
    )
    p.add_argument("--json", type=Path, default=None, help="write results as JSON")
    p.add_argument("--plot", type=Path, default=None, help="write a PNG figure")


def parser(registry: Registry = REGISTRY) -> argparse.ArgumentParser:
    """The CLI; the policy names come from ``registry`` (:mod:`smetric.policy.registry`)."""
    p = OneLineErrors(prog="smetric simulate", description=__doc__.split("\n\n")[0])
    _workload_flags(p, registry)
    for add in (global_tier_flags, _preset_flags, _policy_flags, _router_flags, _window_flags, _run_flags):
        add(p)
    return p


def _seeds(a: argparse.Namespace) -> tuple[int, ...]:
    if a.seed is not None:
        return (a.seed,)
    try:
        seeds = tuple(dict.fromkeys(int(x) for x in a.seeds.split(",") if x.strip()))
    except ValueError:
        raise ValueError(f"--seeds must be comma-separated integers, got {a.seeds!r}") from None
    if not seeds or any(x < 0 for x in seeds):
        raise ValueError(f"--seeds must be non-negative integers, got {a.seeds!r}")
    return seeds


def _spec(a: argparse.Namespace, notes: list[str] | None = None) -> SweepSpec:
    quick = a.quick
    known: tuple[str, ...] = a.known_policies
    file_policy, own_json, file_notes = policy_parameters(a)
    if notes is not None:
        notes += file_notes
    chosen = a.policies or (file_policy if file_policy is not None else QUICK_POLICIES if quick else "all")
    policies = (
        known if chosen == "all" else tuple(dict.fromkeys(x.strip() for x in chosen.split(",") if x.strip()))
    )
    unknown = [x for x in policies if x not in known]
    if unknown:
        raise ValueError(f"unknown policies {unknown}; known: {', '.join(known)}")
    if not policies:
        raise ValueError("--policies is empty")
    if a.resume and a.json is None:
        raise ValueError("--resume needs --json (the runs are kept in its sidecar)")
    seeds = _seeds(a)
    default_rates = rg.MAP_RATES if a.regime_map else QUICK_RATES if quick else "1,2,4,6,8,10"
    rates = tuple(sorted(set(_floats(a.rates or default_rates, "--rates"))))
    warmup_default = rg.MAP_WARMUP_S if a.regime_map else QUICK_WARMUP_S if quick else 3600.0
    measure_default = rg.MAP_MEASURE_S if a.regime_map else QUICK_MEASURE_S if quick else 3600.0
    sim = SimConfig(
        instances=a.instances or (rg.MAP_INSTANCES if a.regime_map else QUICK_INSTANCES if quick else 32),
        mode=a.mode,
        preset=a.preset,
        global_tier=a.global_tier,
        refresh_s=a.refresh_ms / 1e3,
        nic_gbit_s=a.nic_gbit_s,
        global_load_gbit_s=a.global_load_gbit_s or None,
        global_store_gbit_s=a.global_store_gbit_s or None,
        global_lookup_s=a.global_lookup_ms / 1e3,
        global_write_back=not a.no_global_write_back,
        global_load_mode=a.global_load_mode,
        global_placement=a.global_placement,
        global_node_local_gbit_s=a.global_node_local_gbit_s,
        global_chunk_tokens=a.global_chunk_tokens,
        save_decode_cache=a.save_decode_cache,
        global_save_copy=not a.no_global_save_copy,
        kv_dtype=a.kv_dtype,
        tp=a.tp,
        gpu=a.gpu,
        hbm_gb=a.hbm_gb,
        max_context=a.max_context,
        global_aware_slo=not a.local_only_slo_check,
        policy_parameters=own_json,
        router_view=a.router_view,
        tier_hits=a.tier_hits,
        framework_g=a.framework_g,
        legacy_ledger=a.legacy_ledger,
        warmup_s=a.warmup_s if a.warmup_s is not None else warmup_default,
        measure_s=a.measure_s if a.measure_s is not None else measure_default,
        seed=seeds[0],
        arrivals=a.arrivals,
        flow_control=flow_control_json(a.flow_control, a.fc),
    )
    subsample = a.subsample if a.subsample is not None else (QUICK_SUBSAMPLE if quick else None)
    if a.base_rate <= 0 or not math.isfinite(a.base_rate):
        raise ValueError("--base-rate must be a positive number")
    trace = str(a.trace or default_trace())

    def setting(name: str, cfg: SimConfig) -> Setting:
        # the family subset (--subsample) is drawn with the first seed and kept for all seeds
        return Setting(
            name,
            WorkloadSpec(trace, cfg.preset_name, not a.no_shared_system_prompt, subsample, seeds[0]),
            cfg,
        )

    if a.regime_map:
        settings = tuple(setting(r.name, r.apply(sim)) for r in rg.regimes_by_name(a.regimes))
    elif a.regimes:
        raise ValueError("--regimes needs --regime-map")
    else:
        settings = (setting("", sim),)
    headline = "tps_within_slo" if sim.mode == "colocated" else "prefill_tps_within_slo"
    return SweepSpec(
        settings,
        policies,
        rates,
        a.base_rate,
        seeds=seeds,
        extend_past_knee=not a.no_extend_past_knee,
        headline=headline,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    console = Console(stderr=True)
    try:
        for flag, path in (("--json", args.json), ("--plot", args.plot)):
            if path is not None:  # checked before the trace is read
                check_writable(flag, path)
        if args.resume and args.json is not None and sidecar_path(args.json).exists():
            read_rows(sidecar_path(args.json))  # a file that is not a sidecar: one line, before the trace
        notes: list[str] = []
        spec = _spec(args, notes)
        for note in notes:
            console.print(f"[yellow]{note}[/yellow]")
        regimes = rg.regimes_by_name(args.regimes) if args.regime_map else ()
        with sigterm_raises_interrupt():  # SIGTERM unwinds like Ctrl-C: the executor's workers stop
            return run_and_write(
                spec,
                console=console,
                json_path=args.json,
                plot_path=args.plot,
                workers=args.workers,
                cluster=args.cluster,
                resume=args.resume,
                regimes=regimes,
            )
    except KeyboardInterrupt as exc:
        kept = f"; finished runs are in {sidecar_path(args.json)} (--resume)" if args.json else ""
        why = "stopped by SIGTERM" if isinstance(exc, Terminated) else "stopped by SIGINT"
        console.print(f"[yellow]smetric simulate: {why}; its workers were stopped{kept}[/]")
        return interrupt_exit_code(exc)
    except (ValueError, FileNotFoundError) as exc:
        console.print(f"[red]smetric simulate: {exc}[/red]", soft_wrap=True)  # one line, never wrapped
        return 2
    except (OSError, TimeoutError) as exc:  # e.g. --cluster: no scheduler at that address
        console.print(f"[red]smetric simulate: {type(exc).__name__}: {exc}[/red]", soft_wrap=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
