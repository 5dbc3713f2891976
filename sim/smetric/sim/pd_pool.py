"""A P/D pool in the simulator: prefill instances, decode instances, and selective P/D.

The main simulator's ``disaggregated`` mode simulates the prefill instances only (the decode pool
assumed to meet its TPOT SLO). Selective P/D moves prefill work *onto* the decode pods, so here
both pools are engines: ``P`` prefill-only instances and ``D`` decode instances (full engines,
whose decode steps slow down with any prefill chunk they run, as vLLM's mixed batches do).

Per request, as the picker does (:mod:`smetric.epp.server.decide`, the same policy classes and
:func:`smetric.policy.selective_pd.take_prefill_hop`): the decode instance is chosen by the policy
in colocated mode over the decode instances; when the decider keeps the request local the decode
instance computes the uncached suffix itself; otherwise the policy in disaggregated mode picks a
prefill instance, which computes the prompt; its KV then crosses the network to the decode
instance (``prompt_tokens * kv_bytes_per_token`` at ``nic_gbit_s``), lands in that instance's
prefix cache and the decode instance admits the request (it recomputes only what it does not
hold). TTFT is the decode instance's first token; TPOT its decode rate. Arrivals are the trace's
sessions, closed loop (a session's next request follows the previous one's completion and think
time), Poisson family starts at ``families_per_s``.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import math
import sys
from dataclasses import dataclass

import numpy as np

from smetric.core.presets import get_preset
from smetric.core.views import RequestView
from smetric.engine import EngineConfig, EngineEvent, EngineRequest, Instance, StepModel
from smetric.engine.global_tier import instances_per_node
from smetric.policy.framework import Router
from smetric.policy.registry import make_policy
from smetric.policy.selective_pd import take_prefill_hop
from smetric.sim.build import policy_params
from smetric.sim.calibrate import profiled_cost_model
from smetric.sim.config import SimConfig
from smetric.sim.stats import mean_ci95
from smetric.sim.view import RouterView, make_router_view
from smetric.sim.workload import PreparedWorkload, prepare
from smetric.trace.formats import load_trace

_ARRIVAL, _PREFILL, _DECODE, _HANDOFF = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class PdResult:
    non_cached_tokens: int | None
    seed: int
    requests: int  # completed in the measurement window
    local_share: float  # of those, decoded without the prefill hop
    ttft_mean_s: float
    ttft_p90_s: float
    tpot_mean_s: float
    slo_attainment: float  # TTFT and TPOT both within the preset's SLO
    prefill_tokens_moved: int  # prompt tokens whose KV crossed the network


@dataclass(slots=True)
class _Row:
    send_s: float
    local: bool = False
    first_s: float = math.nan
    finish_s: float = math.nan
    decode: int = -1


class PdPool:
    def __init__(
        self,
        work: PreparedWorkload,
        policy: str,
        cfg: SimConfig,
        prefill: int,
        decode: int,
        non_cached: int | None,
    ) -> None:
        self.work, self.cfg, self.non_cached = work, cfg, non_cached
        preset = get_preset(cfg.preset_name)
        self.preset = preset
        bt = work.block_tokens
        model = StepModel.from_preset(preset)
        per_node = instances_per_node(preset)

        def pool(n: int, decodes: bool, prefix: str) -> list[Instance]:
            return [
                Instance(
                    f"{prefix}-{i}",
                    model,
                    EngineConfig.from_preset(preset, bt, decode=decodes, node=i // per_node),
                )
                for i in range(n)
            ]

        self.prefill, self.decode = pool(prefill, False, "prefill"), pool(decode, True, "decode")
        params = policy_params(dataclasses.replace(cfg, mode="colocated", global_tier="none"), preset, bt)
        self.d_router = Router(make_policy(policy, params))
        self.p_router = Router(make_policy(policy, dataclasses.replace(params, mode="disaggregated")))

        def view(instances: list[Instance]) -> RouterView:
            fitted = lambda: profiled_cost_model(preset, bt)  # noqa: E731
            return make_router_view(
                cfg.router_view, instances, preset.cost_model, fitted, cfg.refresh_s, None
            )

        self.p_view, self.d_view = view(self.prefill), view(self.decode)
        self.link_bytes_s = cfg.nic_gbit_s * 1e9 / 8
        self.horizon = cfg.warmup_s + cfg.measure_s
        self.n, self.n_fam = len(work), work.n_families
        self.rows: dict[int, _Row] = {}
        self.fam_start: dict[int, float] = {}
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.version = {(_PREFILL, k): 0 for k in range(prefill)} | {(_DECODE, k): 0 for k in range(decode)}
        self.moved = 0

    def _push(self, t: float, kind: int, a: int, b: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, a, b))

    def run(self, families_per_s: float) -> None:
        work = self.work
        for start, f, clone in work.family_arrivals(families_per_s, self.horizon, self.cfg.seed, 0.0):
            sends = work.first_sends(f, start)
            if sends:
                self.fam_start[clone * self.n_fam + f] = start
            for t_send, i in sends:
                if t_send < self.horizon:
                    self._push(t_send, _ARRIVAL, clone * self.n + i, 0)
        while self.heap:
            t, _, kind, a, b = heapq.heappop(self.heap)
            self.p_view.observe(t)
            self.d_view.observe(t)
            if kind == _ARRIVAL:
                self._arrival(a, t)
            elif kind == _HANDOFF:
                self._handoff(a, b, t)
            elif b == self.version[(kind, a)]:
                pool = self.prefill if kind == _PREFILL else self.decode
                self._events(kind, a, pool[a].advance(t))
                self._touch(kind, a)

    def _request(self, key: int) -> tuple[EngineRequest, RequestView]:
        clone, i = divmod(key, self.n)
        return self.work.keyed_request(key), self.work.view(i, clone)

    def _arrival(self, key: int, t: float) -> None:
        row = self.rows[key] = _Row(t)
        if self.work.dropped[key % self.n]:
            self._completed(key, t)
            return
        req, rview = self._request(key)
        _, dsnaps = self.d_view.snapshots(req, rview)
        d = self.d_router.pick(rview, dsnaps).target
        row.decode = d
        if not take_prefill_hop(req.prompt_tokens, dsnaps[d].local_hit_tokens, self.non_cached):
            row.local = True
            self.d_view.dispatched(key, d, rview, dsnaps[d], t)
            self._submit(_DECODE, d, req, t)
            return
        _, psnaps = self.p_view.snapshots(req, rview)
        p = self.p_router.pick(rview, psnaps).target
        self.p_view.dispatched(key, p, rview, psnaps[p], t)
        self._submit(_PREFILL, p, req, t)

    def _handoff(self, key: int, d: int, t: float) -> None:
        """The prefill's KV has reached decode instance ``d``: cache it there and admit the request."""
        req, rview = self._request(key)
        self.decode[d].cache.insert(req.prompt_pieces)
        _, dsnaps = self.d_view.snapshots(req, rview)
        self.d_view.dispatched(key, d, rview, dsnaps[d], t)
        self._submit(_DECODE, d, req, t)

    def _submit(self, kind: int, k: int, req: EngineRequest, t: float) -> None:
        inst = (self.prefill if kind == _PREFILL else self.decode)[k]
        inst.submit(req, t)
        self._events(kind, k, inst.advance(t))
        self._touch(kind, k)

    def _touch(self, kind: int, k: int) -> None:
        inst = (self.prefill if kind == _PREFILL else self.decode)[k]
        (self.p_view if kind == _PREFILL else self.d_view).changed(k)
        self.version[(kind, k)] += 1
        t_next = inst.next_event_s()
        if t_next < math.inf:
            self._push(t_next, kind, k, self.version[(kind, k)])

    def _events(self, kind: int, k: int, events: list[EngineEvent]) -> None:
        for e in events:
            key = e.request.index
            row = self.rows[key]
            if kind == _PREFILL:
                if e.kind == "first_token":
                    self.p_view.first_token(key, e.time_s, e.timing)
                    tokens = e.request.prompt_tokens
                    self.moved += tokens
                    transfer_s = tokens * self.preset.model.kv_bytes_per_token / self.link_bytes_s
                    self._push(e.time_s + transfer_s, _HANDOFF, key, row.decode)
                continue
            if e.kind == "first_token":
                row.first_s = e.time_s
                self.d_view.first_token(key, e.time_s, e.timing)
            else:
                row.finish_s = e.time_s
                self._completed(key, e.time_s)

    def _completed(self, key: int, t: float) -> None:
        work = self.work
        clone, i = divmod(key, self.n)
        j = int(work.next[i])
        if j < 0:
            return
        fk = clone * self.n_fam + work.family_index[i]
        t_send = max(self.fam_start[fk] + float(work.offset_s[j]), t + float(work.think_s[j]))
        if t_send < self.horizon:
            self._push(t_send, _ARRIVAL, clone * self.n + j, 0)

    def result(self) -> PdResult:
        slo = self.preset.slo
        ttft, tpot, ok, local = [], [], 0, 0
        for key, row in self.rows.items():
            if row.send_s < self.cfg.warmup_s or math.isnan(row.finish_s):
                continue
            req, _ = self._request(key)
            first = row.first_s - row.send_s
            per_token = (row.finish_s - row.first_s) / max(1, req.output_tokens - 1)
            ttft.append(first)
            tpot.append(per_token)
            local += row.local
            ok += first <= slo.ttft_slo_s(req.prompt_tokens) and per_token <= slo.tpot_s
        n = len(ttft)
        return PdResult(
            self.non_cached,
            self.cfg.seed,
            n,
            local / n if n else math.nan,
            float(np.mean(ttft)) if n else math.nan,
            float(np.percentile(ttft, 90)) if n else math.nan,
            float(np.mean(tpot)) if n else math.nan,
            ok / n if n else math.nan,
            self.moved,
        )


def simulate_pd(
    work: PreparedWorkload,
    policy: str,
    families_per_s: float,
    cfg: SimConfig,
    *,
    prefill: int,
    decode: int,
    non_cached_tokens: int | None,
) -> PdResult:
    run = PdPool(work, policy, cfg, prefill, decode, non_cached_tokens)
    run.run(families_per_s)
    return run.result()


def _paired(base: list[float], other: list[float]) -> str:
    diffs = [o - b for b, o in zip(base, other, strict=True)]
    mean, ci = mean_ci95(diffs)
    return f"{mean:+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci is not None else "")


def main(argv: list[str] | None = None) -> int:
    """``python -m smetric.sim.pd_pool TRACE``: always-hop P/D against selective P/D thresholds,
    per seed, with each threshold's paired difference to always-hop (mean, 95 % t-interval)."""
    ap = argparse.ArgumentParser(prog="python -m smetric.sim.pd_pool", description=main.__doc__)
    ap.add_argument("trace")
    ap.add_argument("--policy", default="lmetric")
    ap.add_argument("--rates", default="0.003,0.005", help="family arrivals per second, comma-separated")
    ap.add_argument("--thresholds", default="16,256,1024,4096", help="nonCachedTokens values")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--prefill", type=int, default=4)
    ap.add_argument("--decode", type=int, default=4)
    ap.add_argument("--warmup-s", type=float, default=1800.0)
    ap.add_argument("--measure-s", type=float, default=3600.0)
    a = ap.parse_args(argv)
    try:
        cfg = SimConfig(warmup_s=a.warmup_s, measure_s=a.measure_s, global_tier="none")
        work = prepare(load_trace(a.trace), get_preset(cfg.preset_name))
        seeds = [int(s) for s in a.seeds.split(",")]
        settings: list[int | None] = [None, *(int(x) for x in a.thresholds.split(","))]
        rates = [float(r) for r in a.rates.split(",")]
    except (OSError, ValueError) as exc:
        print(f"pd_pool: {exc}", file=sys.stderr)
        return 2
    keys = ("slo_attainment", "ttft_mean_s", "ttft_p90_s", "tpot_mean_s", "local_share")
    for rate in rates:
        runs = {
            nc: [
                simulate_pd(
                    work,
                    a.policy,
                    rate,
                    dataclasses.replace(cfg, seed=s),
                    prefill=a.prefill,
                    decode=a.decode,
                    non_cached_tokens=nc,
                )
                for s in seeds
            ]
            for nc in settings
        }
        print(f"\n{a.policy}, {a.prefill}P+{a.decode}D, {rate} families/s, seeds {a.seeds}")
        print(
            "nonCachedTokens  requests  "
            + "  ".join(keys)
            + "  | paired vs always-hop: attainment, TTFT mean"
        )
        for nc, rs in runs.items():
            means = [float(np.mean([getattr(r, k) for r in rs])) for k in keys]
            row = f"{'always' if nc is None else nc!s:>15}  {int(np.mean([r.requests for r in rs])):>8}  "
            row += "  ".join(f"{m:.3f}" for m in means)
            if nc is not None:
                base = runs[None]
                row += "  | " + _paired([r.slo_attainment for r in base], [r.slo_attainment for r in rs])
                row += "  " + _paired([r.ttft_mean_s for r in base], [r.ttft_mean_s for r in rs])
            print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
