"""Global-tier usage of simulated runs (a diagnostic, not a test): NIC utilisation, the share of
instance time stalled on synchronous loads, and bytes loaded / written / evicted.

    python -m smetric.bench.evidence.global_tier_usage smetric,bailian 3 0,1,2 --instances 16 --warmup-s 1200 --measure-s 1200

One JSON line per (policy, rate, seed). The figures come from the run's global tier counters
(``GlobalTier.bytes_loaded`` / ``bytes_written``) and each instance's GPU-tier ``evicted_blocks``:

* ``link_util``: (bytes loaded + written) / (nodes x NIC bytes/s x simulated seconds);
* ``load_stall_share``: bytes loaded / the per-instance load rate / (instances x simulated s) --
  with synchronous loads (the default) the share of instance time whose batch waits on a load.

Both cover the whole run (warm-up included). README sections 2 and 4b quote them.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import smetric.sim.simulator as simulator
from smetric.sim.cli import default_trace
from smetric.sim.sweep import BASE_FAMILIES_PER_S_PER_32, WorkloadSpec, prepared


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("policies")
    p.add_argument("rates", help="comma-separated rate multipliers")
    p.add_argument("seeds", help="comma-separated seeds")
    p.add_argument("--instances", type=int, default=32)
    p.add_argument("--warmup-s", type=float, default=1800.0)
    p.add_argument("--measure-s", type=float, default=1800.0)
    a = p.parse_args(argv)
    clusters: list[Any] = []
    build = simulator.build_cluster

    def spy(cfg: Any, preset: Any, block_tokens: int) -> Any:
        cluster = build(cfg, preset, block_tokens)
        clusters.append(cluster)
        return cluster

    simulator.build_cluster = spy  # read the run's cluster back
    work = prepared(WorkloadSpec(str(default_trace())))
    for policy in a.policies.split(","):
        for rate in (float(x) for x in a.rates.split(",")):
            for seed in (int(x) for x in a.seeds.split(",")):
                cfg = simulator.SimConfig(
                    instances=a.instances, warmup_s=a.warmup_s, measure_s=a.measure_s, seed=seed
                )
                fam_s = BASE_FAMILIES_PER_S_PER_32 * a.instances / 32 * rate
                res = simulator.simulate(work, policy, fam_s, cfg, rate_multiplier=rate)
                cluster = clusters[-1]
                gt = cluster[0].global_tier
                horizon_s = cfg.warmup_s + cfg.measure_s
                out: dict[str, Any] = {
                    "policy": policy,
                    "rate": rate,
                    "seed": seed,
                    "tps_within_slo": res.metrics["tps_within_slo"],
                    "local_hit_ratio": res.metrics["local_hit_ratio"],
                    "global_hit_ratio": res.metrics["global_hit_ratio"],
                    "decision_reasons": res.reasons,
                }
                if gt is not None:
                    nodes = len({inst.config.node for inst in cluster})
                    out.update(
                        link_util=(gt.bytes_loaded + gt.bytes_written) / (nodes * gt.nic_bytes_s * horizon_s),
                        load_stall_share=gt.bytes_loaded / gt.load_bytes_s / (len(cluster) * horizon_s),
                        loaded_gb=gt.bytes_loaded / 1e9,
                        written_gb=gt.bytes_written / 1e9,
                        local_evicted_gb=sum(i.cache.evicted_blocks for i in cluster) * gt.block_bytes / 1e9,
                    )
                print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
