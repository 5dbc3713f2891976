"""Why balance-aware routing collapses past the knee: one simulated run per (policy, rate) with
the overload probe (``smetric.sim.gateway.OverloadProbe``); prints one JSON line per run.

    python -m smetric.bench.evidence.overload_diagnosis --instances 16 --rates 3.5,5 --policies smetric,dynamo,round-robin

Per run: TPS within SLO; the share of dispatches the router's own TTFT estimate already said no
instance could meet (``doomed_at_dispatch_share``) and how many of those missed; the share of
requests that missed their TTFT SLO; dispatches to an engine that already had requests waiting;
the engines' waiting queue (time mean over instances, the worst instance's mean, the peak);
herding (the most dispatches one instance took within one scrape interval, mean and p99 over
intervals); GPU prefix-cache evictions (blocks) and the local / global hit shares. docs/overload.md.

Behind the gate (``--flow-control``), per request dispatched in the window (docs/overload.md, 8e):
how its TTFT compares with the gate's estimate at the chosen endpoint (``ttft_over_estimate_*``:
the TTFT since the first send over the estimate plus the time already waited), how much hit the
snapshot credited beyond what the engine really reused (``credited_minus_reused_tokens_*``:
``max(c, g)`` at dispatch minus the engine's local + global hit), and what it missed
(``dispatched_ok`` / ``dispatched_missed_ttft`` / ``dispatched_missed_tpot_only``), and of its TTFT
misses the share whose engine reused at least half the prompt (``missed_ttft_with_hit_share``: a
cache hit that still came too late) and how long they had waited before their dispatch
(``missed_ttft_waited_s_*``: the gate's queue, a 429 and the resend).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence

import numpy as np

from smetric.core.presets import get_preset
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import PolicyParams
from smetric.policy.estimates import prompt_tokens, tier_times_s
from smetric.router import dispatch_work
from smetric.sim.cli import default_trace
from smetric.sim.config import SimConfig
from smetric.sim.gateway import OverloadProbe
from smetric.sim.simulator import _Run, policy_params, simulate
from smetric.sim.sweep import BASE_FAMILIES_PER_S_PER_32, WorkloadSpec, prepared


class GateProbe(OverloadProbe):
    """The overload probe plus, per dispatch in the window, the gate's estimate at the chosen endpoint, the
    time already waited and the hit the snapshot credited (``max(c, g)``)."""

    __slots__ = ("_params", "_sent", "at_dispatch")

    def __init__(
        self, params: PolicyParams, n_instances: int, tick_s: float, lo_s: float, hi_s: float, run: _Run
    ) -> None:
        super().__init__(params, n_instances, tick_s, lo_s, hi_s)
        self._params = params
        self._sent = run.table.by_key
        self.at_dispatch: dict[int, tuple[float, float, int]] = {}  # key -> (estimate s, waited s, credited)

    def dispatched(
        self, key: int, t: float, request: RequestView, snaps: list[EndpointSnapshot], k: int
    ) -> None:
        super().dispatched(key, t, request, snaps, k)
        if not self.lo_s <= t < self.hi_s:
            return
        p, s = self._params, snaps[k]
        est = tier_times_s(request, [s], p.cost_model, p.global_fetch_s_per_token)[0]
        # what the ledger's charge took as not computed: max(c, g), clamped as the charge clamps it
        w = dispatch_work(p.cost_model, prompt_tokens(request), s.local_hit_tokens, s.global_hit_tokens)
        self.at_dispatch[key] = (est, t - self._sent[key].send_s, w.prompt_tokens - w.computed_tokens)


def _pcts(prefix: str, x: Sequence[float]) -> dict[str, float]:
    a = np.asarray(x, dtype=np.float64)
    if not a.size:
        return {}
    p50, p90 = np.percentile(a, [50, 90])
    return {f"{prefix}_mean": float(a.mean()), f"{prefix}_p50": float(p50), f"{prefix}_p90": float(p90)}


def _ttft_ok(run: _Run, key: int) -> bool:
    """Request ``key`` had its first token within its TTFT SLO (counted from its first send)."""
    row = run.table.by_key[key]
    ttft = row.first_token_s - row.send_s
    return math.isfinite(ttft) and ttft <= run.preset.slo.ttft_slo_s(
        run.work.engine[key % run.n].prompt_tokens
    )


def gate_summary(run: _Run, probe: GateProbe, colocated: bool) -> dict[str, float]:
    """The per-dispatch figures of the module docstring, from a finished run."""
    slo = run.preset.slo
    ratio: list[float] = []
    gap: list[float] = []
    missed_waited: list[float] = []
    ok = ttft_miss = tpot_only = missed_with_hit = 0
    for key, (est, waited, credited) in probe.at_dispatch.items():
        row = run.table.by_key[key]
        e = run.work.engine[key % run.n]
        ttft = row.first_token_s - row.send_s
        ttft_ok = _ttft_ok(run, key)
        tpot_ok = True
        if colocated and e.output_tokens > 1 and math.isfinite(row.finish_s):
            tpot_ok = (row.finish_s - row.first_token_s) / (e.output_tokens - 1) <= slo.tpot_s
        ok += ttft_ok and tpot_ok
        ttft_miss += not ttft_ok
        tpot_only += ttft_ok and not tpot_ok
        reused = row.local_hit_tokens + row.global_hit_tokens
        if not ttft_ok:
            missed_waited.append(waited)
            missed_with_hit += 2 * reused >= e.prompt_tokens
        if math.isfinite(ttft):
            ratio.append(ttft / max(est + waited, 1e-9))
        gap.append(credited - reused)
    n = max(1, len(probe.at_dispatch))
    return {
        "dispatched_ok": ok / n,
        "dispatched_missed_ttft": ttft_miss / n,
        "dispatched_missed_tpot_only": tpot_only / n,
        # of the TTFT misses: the share whose engine reused at least half the prompt (local or tier),
        # and how long they had waited before their dispatch (the gate's queue, 429s and resends)
        "missed_ttft_with_hit_share": missed_with_hit / max(1, ttft_miss),
        **_pcts("missed_ttft_waited_s", missed_waited),
        **_pcts("ttft_over_estimate", ratio),
        **_pcts("credited_minus_reused_tokens", gap),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--instances", type=int, default=16)
    p.add_argument("--mode", default="colocated")
    p.add_argument("--global-tier", default="full")
    p.add_argument("--tp", type=int, default=None, help="tensor parallel GPUs per instance (SimConfig.tp)")
    p.add_argument("--kv-dtype", default="bf16", help="KV cache dtype (SimConfig.kv_dtype)")
    p.add_argument("--framework-g", default="tier", help="SimConfig.framework_g (tier | session)")
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
        tp=a.tp,
        kv_dtype=a.kv_dtype,
        framework_g=a.framework_g,
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
            probes: list[GateProbe] = []

            def make(run: _Run, runs: list[_Run] = runs, probes: list[GateProbe] = probes) -> OverloadProbe:
                pr = GateProbe(
                    policy_params(cfg, preset, work.block_tokens), cfg.instances, cfg.refresh_s, lo, hi, run
                )
                runs.append(run)
                probes.append(pr)
                return pr

            fam_s = BASE_FAMILIES_PER_S_PER_32 * cfg.instances / 32.0 * rate
            res = simulate(work, policy, fam_s, cfg, rate_multiplier=rate, probe=make)
            run, probe = runs[0], probes[0]
            missed = {
                r.key
                for r in run.table.rows
                if lo <= r.send_s < hi and r.instance >= 0 and not _ttft_ok(run, r.key)
            }
            out = {
                "policy": policy,
                "rate": rate,
                "framework_g": cfg.framework_g,
                "tps_within_slo": round(float(res.metrics["tps_within_slo"]), 1),
                "prefill_tps_within_slo": round(float(res.metrics["prefill_tps_within_slo"]), 1),
                "ttft_p50_s": round(float(res.metrics["ttft_p50_s"]), 2),
                **{
                    k: (round(v, 3) if isinstance(v, float) else v)
                    for k, v in probe.summary(missed, [i.cache.evicted_blocks for i in run.cluster]).items()
                },
                **{k: round(v, 3) for k, v in gate_summary(run, probe, cfg.mode == "colocated").items()},
                "local_hit_ratio": round(float(res.metrics["local_hit_ratio"]), 3),
                "global_hit_ratio": round(float(res.metrics["global_hit_ratio"]), 3),
                "imbalance_mean": round(float(res.metrics["imbalance_mean"]), 2),
                "fc_shed_share": res.metrics.get("fc_shed_share"),
                "reasons": res.reasons,
            }
            print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
