"""Why balance-aware routing collapses past the knee: one simulated run per (policy, rate) with
the overload probe (``smetric.sim.gateway.OverloadProbe``); prints one JSON line per run.

    python -m smetric.bench.evidence.overload_diagnosis --instances 16 --rates 3.5,5 --policies smetric,dynamo,round-robin

Per run: TPS within SLO; the share of dispatches the router's own TTFT estimate already said no
instance could meet (``doomed_at_dispatch_share``) and how many of those missed; the share of
requests that missed their TTFT SLO; dispatches to an engine that already had requests waiting;
the engines' waiting queue (time mean over instances, the worst instance's mean, the peak);
herding (the most dispatches one instance took within one scrape interval, mean and p99 over
intervals); GPU prefix-cache evictions (blocks) and the local / global hit shares. docs/overload.md.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from smetric.core.presets import get_preset
from smetric.sim.cli import default_trace
from smetric.sim.config import SimConfig
from smetric.sim.gateway import OverloadProbe
from smetric.sim.simulator import _Run, policy_params, simulate
from smetric.sim.sweep import BASE_FAMILIES_PER_S_PER_32, WorkloadSpec, prepared


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--instances", type=int, default=16)
    p.add_argument("--mode", default="colocated")
    p.add_argument("--global-tier", default="full")
    p.add_argument("--policies", default="smetric,lmetric,dynamo,round-robin")
    p.add_argument("--rates", default="3.5,5")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup-s", type=float, default=3600.0)
    p.add_argument("--measure-s", type=float, default=3600.0)
    p.add_argument("--flow-control", default="", help="SimConfig.flow_control JSON ('' = off)")
    a = p.parse_args(argv)
    cfg = SimConfig(
        instances=a.instances,
        mode=a.mode,
        global_tier=a.global_tier,
        seed=a.seed,
        warmup_s=a.warmup_s,
        measure_s=a.measure_s,
        flow_control=a.flow_control,
    )
    work = prepared(WorkloadSpec(str(default_trace()), cfg.preset_name))
    preset = get_preset(cfg.preset_name)
    lo, hi = cfg.warmup_s, cfg.warmup_s + cfg.measure_s
    for rate in (float(x) for x in a.rates.split(",")):
        for policy in a.policies.split(","):
            runs: list[_Run] = []
            probes: list[OverloadProbe] = []

            def make(
                run: _Run, runs: list[_Run] = runs, probes: list[OverloadProbe] = probes
            ) -> OverloadProbe:
                pr = OverloadProbe(
                    policy_params(cfg, preset, work.block_tokens), cfg.instances, cfg.refresh_s, lo, hi
                )
                runs.append(run)
                probes.append(pr)
                return pr

            fam_s = BASE_FAMILIES_PER_S_PER_32 * cfg.instances / 32.0 * rate
            res = simulate(work, policy, fam_s, cfg, rate_multiplier=rate, probe=make)
            run, probe = runs[0], probes[0]
            slo = preset.slo
            missed: set[int] = set()
            for r in run.table.rows:
                if not lo <= r.send_s < hi or r.instance < 0:
                    continue
                prompt = work.engine[r.key % run.n].prompt_tokens
                ttft = r.first_token_s - r.send_s
                if not (math.isfinite(ttft) and ttft <= slo.ttft_slo_s(prompt)):
                    missed.add(r.key)
            out = {
                "policy": policy,
                "rate": rate,
                "tps_within_slo": round(float(res.metrics["tps_within_slo"]), 1),
                "ttft_p50_s": round(float(res.metrics["ttft_p50_s"]), 2),
                **{
                    k: (round(v, 3) if isinstance(v, float) else v)
                    for k, v in probe.summary(missed, [i.cache.evicted_blocks for i in run.cluster]).items()
                },
                "local_hit_ratio": round(float(res.metrics["local_hit_ratio"]), 3),
                "global_hit_ratio": round(float(res.metrics["global_hit_ratio"]), 3),
                "imbalance_mean": round(float(res.metrics["imbalance_mean"]), 2),
                "reasons": res.reasons,
            }
            print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
