"""``python -m smetric.bench.differential_run``: one plan through the simulator and through Envoy +
picker + emulator, request by request (docs/bench.md, "Differential harness").

1. ``smetric bench --quick`` (its preset: 4 instances, the full global tier, steady agents, tokens
   x1/8 with the cost preserved; pinned to the --quick of 4 Dec 2026: time x0.002, a 1,200 + 4,800
   model s window, pickers in model units, rows one after the other; ``--bench-arg`` overrides)
   with ``--decision-log --records`` at one load and seed, for the given policies (child process;
   ``--bench-dir`` reuses a finished run).
2. The simulator in-process on the same trace (loaded as the bench loads it), instances, preset,
   tier, agents (same seed: the same families per agent), warm-up + window, and the bench's scrape
   interval in model time; it records, per request, the snapshots its router saw.
3. The pairs (:mod:`smetric.bench.differential`), agreement per policy, causes, TTFT and TPS
   within SLO of both tools side by side; a table and ``--json``.

The simulator's global tier starts empty, as the emulator's does (``prewarm_global_tier`` off).
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from smetric.bench.compare import spearman
from smetric.bench.cpu import picker_timers
from smetric.bench.differential import (
    CAUSES,
    Decision,
    EndpointView,
    agreement,
    bench_decisions,
    loop_delays,
    match,
    read_decisions,
)
from smetric.bench.inputs import find_trace, load_trace
from smetric.bench.presets import QUICK, QUICK_X0002
from smetric.bench.procs import BenchError, check_writable, run_child, stopped
from smetric.bench.stacks import smetric_argv
from smetric.core.argparsing import OneLineErrors
from smetric.core.presets import get_preset
from smetric.core.stopping import sigterm_raises_interrupt
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import Decision as PolicyDecision
from smetric.sim.config import SimConfig
from smetric.sim.simulator import _ARRIVAL, _Run
from smetric.sim.workload import PreparedWorkload, prepare

BENCH_TIMEOUT_S = 1800.0
BENCH_STOP_GRACE_S = 30.0  # the bench's own drain (10 s) and process stops, with room


class _Recorder:
    """Wraps the simulator's router: keeps each decision's snapshots under the request's key."""

    def __init__(self, run: _RecordingRun, router: Any) -> None:
        self.run, self.router = run, router

    def pick(self, request: RequestView, snaps: list[EndpointSnapshot]) -> PolicyDecision:
        d: PolicyDecision = self.router.pick(request, snaps)
        self.run.seen[self.run.key] = (self.run.now, d.target, tuple(snaps))
        return d


class _RecordingRun(_Run):
    """A simulator run that also records each decision's snapshots and, per family clone, the
    agent running it and its ordinal among the agent's families (the bench's ``~a<agent>.<n>``)."""

    def __init__(
        self, work: PreparedWorkload, policy: str, cfg: SimConfig, loop_delay_s: float = 0.0
    ) -> None:
        super().__init__(work, policy, cfg)
        self.loop_delay_s = loop_delay_s
        self.key, self.now = -1, 0.0
        self.seen: dict[int, tuple[float, int, tuple[EndpointSnapshot, ...]]] = {}
        self.agent_n: dict[int, int] = {}  # agent -> families started so far
        self.clone_of: dict[int, tuple[int, int]] = {}  # clone * F + family -> (agent, n)
        self.router = _Recorder(self, self.router)  # type: ignore[assignment]

    def completed(self, key: int, t: float) -> None:
        """The session's next turn leaves ``loop_delay_s`` later (the bench's time outside the engine)."""
        super().completed(key, t + self.loop_delay_s)

    def arrival(self, key: int, t: float, fk: int, retry: bool = False) -> None:
        self.key, self.now = key, t
        super().arrival(key, t, fk, retry)

    def family_taken(self, agent: int, fk: int) -> None:
        """Notes (agent, n) of every family the agent goes through."""
        nth = self.agent_n.get(agent, 0)
        self.agent_n[agent] = nth + 1
        self.clone_of[fk] = (agent, nth)


class _OpenLoopRun(_RecordingRun):
    """The bench's own send times as arrivals (no closed loop): both routers decide at the same
    model time, so what remains of a divergence is the routers' views."""

    def seed_sends(self, sends: Sequence[tuple[float, int]]) -> None:
        for t, key in sorted(sends):
            if t < self.horizon:
                self.seq += 1
                self.heap.append((t, self.seq, _ARRIVAL, key, 0))
        heapq.heapify(self.heap)

    def completed(self, key: int, t: float) -> None:
        return  # the next send is the bench's


def sim_decisions(
    work: PreparedWorkload,
    policy: str,
    rate: float,
    cfg: SimConfig,
    loop_delay_s: float = 0.0,
    sends: Sequence[tuple[float, str]] | None = None,
) -> tuple[list[Decision], dict[str, float | int], dict[str, int]]:
    """The simulator's decisions under the bench's request ids, its run metrics and the request
    keys by id. ``loop_delay_s``: model seconds added to every request's completion for its
    session's loop; ``sends``: the bench's ``(send time, request id)`` as open-loop arrivals instead
    (ids unknown to ``key_of``, a closed-loop run's map, are left out)."""
    run: _RecordingRun
    key_of: dict[str, int] = {}
    if sends is None:
        run = _RecordingRun(work, policy, cfg, loop_delay_s)
        run.seed_arrivals(rate)
    else:
        _, _, key_of = sim_decisions(work, policy, rate, cfg)
        run = _OpenLoopRun(work, policy, cfg)
        run.seed_sends([(t, key_of[rid]) for t, rid in sends if rid in key_of])
    run.run(None)
    metrics = run.metrics()
    refresh = cfg.refresh_s
    rid_of = {k: r for r, k in key_of.items()}
    out: list[Decision] = []
    for row in run.table.rows:
        seen = run.seen.get(row.key)
        if seen is None:
            continue
        t, target, snaps = seen
        clone, i = divmod(row.key, run.n)
        rid = rid_of.get(row.key, "")
        if not rid:
            agent, nth = run.clone_of.get(clone * run.n_fam + work.family_index[i], (-1, -1))
            v = work.views[i]
            rid = f"{v.session_id}~a{agent}.{nth}#{v.turn}"
            key_of[rid] = row.key
        age = t - math.floor(t / refresh) * refresh  # every engine is scraped at every tick
        views = tuple(
            EndpointView(s.running, s.waiting, s.queued_prefill_tokens, s.local_hit_tokens, s.global_hit_tokens,
                         s.stale, age)
            for s in snaps
        )  # fmt: skip
        ttft = row.first_token_s - row.send_s
        out.append(Decision(rid, t, target, ttft, views))
    return out, metrics, key_of


def run_bench(
    out: Path, policies: Sequence[str], rate: float, seed: int, trace: Path, more: Sequence[str] = ()
) -> None:
    cmd = [*smetric_argv("bench"), "--quick", "--policies", ",".join(policies),
           "--peer", "none", "--rates", f"{rate:g}", "--seeds", "1", "--seed", str(seed), "--decision-log",
           "--no-flow-control",  # the routing decisions are compared: the simulator side runs none either
           "--trace", str(trace), "--records", str(out / "records.jsonl"), "--log-dir", str(out / "logs"),
           "--json", str(out / "bench.json"), "--no-concurrent-rows",
           *(x for kv in QUICK_X0002.items() for x in kv), *more]  # fmt: skip
    print("differential: " + " ".join(cmd[2:]), flush=True)
    rc = run_child(cmd, BENCH_TIMEOUT_S, BENCH_STOP_GRACE_S)
    if rc is None:
        raise BenchError(f"smetric bench ran past {BENCH_TIMEOUT_S:g} s and was stopped")
    if rc != 0:
        raise BenchError(f"smetric bench ended with status {rc} (its own message is above)")


def read_bench_json(bench_dir: Path) -> dict[str, Any]:
    """The bench run's ``bench.json`` (its preset and results), else a :class:`BenchError`."""
    path = bench_dir / "bench.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BenchError(f"{path}: cannot read it ({exc.strerror or exc}); run without --reuse") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BenchError(f"{path}: not valid JSON ({exc})") from None
    if not (isinstance(doc, dict) and "preset" in doc.get("meta", {}) and "results" in doc):
        raise BenchError(f"{path}: not a smetric bench --json output (no meta.preset or results)")
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    """:func:`run`; an unusable argument, input or output is one line on stderr (exit 2). SIGTERM
    or SIGINT stops the bench child (it stops its engines, picker and Envoy) and exits 143 / 130."""
    prog = "python -m smetric.bench.differential_run"
    try:
        with sigterm_raises_interrupt():
            return run(argv)
    except BenchError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        return stopped(prog, exc)


def run(argv: Sequence[str] | None = None) -> int:
    p = OneLineErrors(prog="python -m smetric.bench.differential_run", description=__doc__.split("\n\n")[0])
    p.add_argument("--policies", default="smetric,lmetric")
    p.add_argument(
        "--rate", type=float, default=QUICK.rates[0], help="families per model second (steady agents)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trace", type=Path, help="default: the bench's")
    p.add_argument(
        "--bench-dir", type=Path, required=True, help="the bench run's folder (run here unless --reuse)"
    )
    p.add_argument("--reuse", action="store_true", help="read a finished bench run in --bench-dir")
    p.add_argument("--json", type=Path, required=True)
    p.add_argument("--bench-arg", action="append", default=[], metavar="ARG",
                   help="passed on to smetric bench (repeatable), e.g. --bench-arg=--duration=600")  # fmt: skip
    args = p.parse_args(argv)  # fmt: skip
    policies = [x for x in args.policies.split(",") if x]
    # before the bench runs: the output, the folder, the trace (and a reused run's files)
    check_writable("--json", args.json)
    try:
        args.bench_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BenchError(
            f"--bench-dir {args.bench_dir}: cannot make the folder ({exc.strerror or exc})"
        ) from None
    trace_path = find_trace(args.trace)
    trace = load_trace(trace_path, "qwen3-30b-h20")
    if args.reuse:
        read_bench_json(args.bench_dir)
    else:
        run_bench(args.bench_dir, policies, args.rate, args.seed, trace_path, args.bench_arg)
    bench_doc = read_bench_json(args.bench_dir)
    pre = bench_doc["meta"]["preset"]
    ts, k = float(pre["time_scale"]), 1.0 / float(pre["token_scale"])
    refresh_s = float(picker_timers(ts)["picker_refresh_model_s"])
    work = prepare(trace, get_preset("qwen3-30b-h20"))
    cfg = SimConfig(instances=int(pre["instances"]), global_tier=str(pre["global_tier"]), refresh_s=refresh_s,
                    warmup_s=float(pre["warmup_s"]), measure_s=float(pre["duration_s"]), seed=args.seed,
                    arrivals="agents", prewarm_global_tier=False)  # fmt: skip
    records = read_records(args.bench_dir / "records.jsonl")
    bench_tps = {
        r["policy"]: r["summary"]["tps_within_slo"] for r in bench_doc["results"] if r.get("summary")
    }
    console = Console(width=120)
    doc: dict[str, Any] = {"bench_dir": str(args.bench_dir), "rate": args.rate, "seed": args.seed, "token_k": k,
                           "time_scale": ts, "refresh_model_s": refresh_s, "policies": {}}  # fmt: skip
    table = Table(
        title=f"differential: {pre['instances']} instances, {args.rate:g} families/model s, seed {args.seed}"
    )
    for head in ("policy", "simulator loop", "matched (+bench/+sim only)", "agree", "same-time", "causes",
                 "TTFT p50 b/s", "TPS in SLO b/s"):  # fmt: skip
        table.add_column(head)
    sim_tps: dict[str, dict[str, float]] = {}
    for policy in policies:
        log = next(args.bench_dir.glob(f"logs/*/{policy}/picker.log"), None)
        if log is None:
            raise BenchError(
                f"{args.bench_dir}: no logs/*/{policy}/picker.log (was {policy} a row of that run?)"
            )
        decided = read_decisions(log.read_bytes().splitlines(), k, ts)
        mine = [r for r in records if r["label"] == policy]
        bench = bench_decisions(mine, decided, ts)
        delays = loop_delays(mine, ts)
        doc["policies"][policy] = {
            "bench_loop_delay_model_s": delays,
            "tps_within_slo_bench": bench_tps.get(policy),
        }
        # the bench's mean scrape age is half its effective scrape period (scrapes at a steady period)
        ages = [v.scrape_age_s for d in bench for v in d.views if math.isfinite(v.scrape_age_s)]
        period = 2.0 * sum(ages) / len(ages) if ages else refresh_s
        doc["policies"][policy]["bench_scrape_period_model_s"] = period
        scraped = dataclasses.replace(cfg, refresh_s=period)
        sends = [(d.send_s, d.request_id) for d in bench]
        variants = (("as is", 0.0, cfg, None), ("bench's loop", delays["total_s"], cfg, None),
                    ("loop+scrape", delays["total_s"], scraped, None), ("bench's sends", 0.0, scraped, sends))  # fmt: skip
        for variant, delay, vcfg, vsends in variants:
            sim, metrics, _ = sim_decisions(work, policy, args.rate, vcfg, delay, vsends)
            sim_tps.setdefault(variant, {})[policy] = float(metrics["tps_within_slo"])
            pairs, only_bench, only_sim = match(bench, sim)
            res = agreement(pairs, refresh_s)
            ttft_b, ttft_s = _p50([p.bench.ttft_s for p in pairs]), _p50([p.sim.ttft_s for p in pairs])
            res.update(loop_delay_model_s=delay, bench_only=only_bench, sim_only=only_sim, bench_sent=len(bench),
                       sim_sent=len(sim), ttft_p50_bench_s=ttft_b, ttft_p50_sim_s=ttft_s,
                       tps_within_slo_sim=float(metrics["tps_within_slo"]),
                       sim_slo_attainment=metrics.get("slo_attainment"))  # fmt: skip
            doc["policies"][policy][variant] = res
            same = res["agreement_same_time"]
            table.add_row(
                policy, variant, f"{res['matched']} (+{only_bench}/+{only_sim})",
                f"{res['agreement']:.0%}", f"{same['agreement']:.0%} of {same['n']}",
                _causes_cell(res["causes"]), f"{ttft_b:.1f}/{ttft_s:.1f}",
                f"{bench_tps.get(policy, math.nan):.1f}/{res['tps_within_slo_sim']:.1f}",
            )  # fmt: skip
    console.print(table)
    legend = ", ".join(f"{_ABBR[c]} = {c}" for c in CAUSES[:-1])
    console.print(f"causes of each session's first divergence: {legend}; inh = inherited (the session's later "
                  f"divergences). same-time: sent within one scrape interval ({refresh_s:g} model s)")  # fmt: skip
    common = [p for p in policies if p in bench_tps]
    doc["spearman"] = {}
    for variant, tps in sim_tps.items():
        rho = spearman([bench_tps[p] for p in common], [tps[p] for p in common])
        doc["spearman"][variant] = rho
        console.print(f"Spearman rho of the policy rankings by TPS within SLO, simulator {variant}: {rho:+.2f} "
                      f"over {len(common)} policies")  # fmt: skip
    try:  # the table is printed already: a failed write loses no figure on screen
        args.json.write_text(json.dumps(doc, indent=1, default=str))
    except OSError as exc:
        raise BenchError(f"--json {args.json}: cannot write there ({exc.strerror or exc})") from None
    return 0


def read_records(path: Path) -> list[dict[str, Any]]:
    """The bench's ``--records`` (one JSON object a line), else a :class:`BenchError`."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise BenchError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        return [orjson.loads(x) for x in lines if x.strip()]
    except orjson.JSONDecodeError as exc:
        raise BenchError(f"{path}: not valid JSON lines ({exc})") from None


_ABBR = {"pacing": "pace", "tie-break": "tie", "prefix index": "prefix", "gauges": "gauge",
         "ledger timing": "ledger", "global hit": "g", "unattributed": "?", "inherited": "inh"}  # fmt: skip


def _causes_cell(causes: dict[str, int]) -> str:
    """Non-zero cause counts, abbreviated (the legend is printed under the table)."""
    return " ".join(f"{n} {_ABBR.get(c, c)}" for c, n in causes.items() if n) or "-"


def _p50(xs: Sequence[float]) -> float:
    ys = sorted(x for x in xs if math.isfinite(x))
    return ys[len(ys) // 2] if ys else math.nan


if __name__ == "__main__":
    raise SystemExit(main())
