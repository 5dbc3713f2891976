"""What ``smetric bench`` makes of its arguments before any process starts: the preset they resolve
to, the outputs checked writable, the trace found and loaded, the replay plan of one (rate, seed)."""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

from smetric.bench.plan import AgentPlan, ReplayPlan, agent_plan, build_plan, stationary_plan
from smetric.bench.presets import Preset, preset_for
from smetric.bench.procs import BenchError, check_writable
from smetric.bench.stacks import check_peer
from smetric.bench.sweep import rung
from smetric.bench.synth import TokenCount
from smetric.core.presets import get_preset
from smetric.policy import known_policies
from smetric.trace.model import Trace

TRACE_FILE = "claude-code-agentic.jsonl.gz"


def check_outputs(args: argparse.Namespace) -> None:
    """Fail before any work when an output cannot be written (or the figure cannot be drawn)."""
    for flag, path in (("--json", args.json), ("--plot", args.plot), ("--markdown", args.markdown),
                       ("--records", args.records)):  # fmt: skip
        if path is not None:
            check_writable(flag, path)
    if args.plot is not None:
        if args.plot.suffix.lower() != ".png":
            raise BenchError(f"--plot {args.plot}: the figure is a PNG; name the file *.png")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise BenchError("--plot needs matplotlib: pip install matplotlib") from None
    if args.log_dir is not None:
        check_log_dir(args.log_dir)


def check_log_dir(path: Path) -> None:
    """``--log-dir`` made (with its parents) and writable, else a :class:`BenchError` (one line)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BenchError(f"--log-dir {path}: cannot make the folder ({exc.strerror or exc})") from None
    check_writable("--log-dir", path / ".smetric-bench-check")


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
    candidates = list(dict.fromkeys(c.resolve() for c in candidates))
    for c in candidates:
        if c.is_file():
            return c
    raise BenchError(
        f"agentic trace not found (tried {', '.join(map(str, candidates))}); pass --trace or set "
        "$SMETRIC_TRACES (docs/traces.md: where the traces come from, and how to bring your own)"
    )


def load_trace(trace_path: Path, preset_name: str) -> Trace:
    """The agentic trace; a malformed or unreadable file is a :class:`BenchError` (one line)."""
    from smetric.trace import load_agentic

    # A prompt must fit one instance's KV cache (vLLM refuses a max_model_len above it): requests over
    # it are dropped by the loader (their sessions continue), as the simulator does.
    inst = get_preset(preset_name)
    limit = min(inst.model.max_context_tokens, inst.kv_capacity_tokens)
    try:
        trace = load_agentic(trace_path, max_context_tokens=limit)
    except ValueError as exc:  # TraceFormatError is one: the file, the line and what is wrong
        where = "" if str(trace_path) in str(exc) else f"{trace_path}: "
        raise BenchError(f"trace {where}{exc}") from None
    except (OSError, EOFError) as exc:  # unreadable, or a gzip file cut short
        raise BenchError(
            f"trace {trace_path}: cannot read it ({getattr(exc, 'strerror', None) or exc})"
        ) from None
    if not trace.requests:
        raise BenchError(
            f"trace {trace_path}: no request to replay (an empty file, or every request longer than "
            f"the {limit:,} tokens one {preset_name} instance holds)"
        )
    return trace


def families_for(n_families: int, preset: Preset, rate: float) -> int:
    """Families of one ``cold`` run: ``--sessions``, else enough to arrive over the whole replay
    (warm-up and window)."""
    wanted = preset.sessions or math.ceil(rate * (preset.warmup_s + preset.duration_s))
    return max(1, min(wanted, n_families))


def make_plan(
    trace: Trace, args: argparse.Namespace, preset: Preset, rate: float, seed: int
) -> tuple[ReplayPlan | AgentPlan, list[str]]:
    """The replay plan of one (rate, seed) for ``preset.arrivals`` and the trace's notes:
    ``agents`` = :func:`agent_plan` (they join over the first half of the warm-up, as the
    simulator's agents do), ``stationary`` = :func:`stationary_plan` over warm-up + window,
    ``cold`` = ``ceil(rate x (warm-up + window))`` sampled families with Poisson starts from 0."""
    from smetric.trace import family_start_times, subsample_families

    capacity = scaled_kv_capacity(args, preset)
    if preset.arrivals == "agents":
        agents = agent_plan(
            trace, rate, seed, preset.warmup_s / 2, preset.token_scale, args.max_turns, capacity
        )
        return agents, [*trace.notes, f"{agents.n_agents} steady agents over {len(agents.families)} families"]
    if preset.arrivals == "stationary":
        horizon = preset.warmup_s + preset.duration_s
        return stationary_plan(
            trace, rate, seed, horizon, preset.token_scale, args.max_turns, capacity
        ), list(trace.notes)
    n_families = len({r.family_id for r in trace.requests})
    k = families_for(n_families, preset, rate)
    sub = subsample_families(trace, k / n_families, seed)
    starts = family_start_times(sub, rate, seed)
    plan = build_plan(sub, list(starts), starts, preset.token_scale, args.max_turns, capacity)
    return plan, list(sub.notes)


def scaled_kv_capacity(args: argparse.Namespace, preset: Preset) -> int:
    """The preset's KV capacity times the token scale (whole blocks): the same sessions-per-instance
    ratio as the unscaled trace on the real instance."""
    tokens = int(get_preset(args.preset).kv_capacity_tokens * preset.token_scale)
    return max(args.block_size, tokens - tokens % args.block_size)


def parse_rates(args: argparse.Namespace) -> tuple[float, ...]:
    """``--rates`` / ``--rate`` as a sorted tuple (empty = find the knee)."""
    if args.rates is not None and args.rate is not None:
        raise BenchError("give --rates or --rate, not both")
    text = args.rates if args.rates is not None else ("" if args.rate is None else str(args.rate))
    try:
        rates = tuple(sorted({rung(float(x)) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise BenchError(f"--rates must be comma-separated numbers, got {text!r}") from None
    if any(not (math.isfinite(r) and r > 0) for r in rates):
        raise BenchError("--rates must be positive numbers")
    return rates


def resolve(args: argparse.Namespace) -> Preset:
    base = preset_for(args.quick, args.arrivals)
    instances = args.instances if args.instances is not None else base.instances
    peers = base.peers if args.peer is None else tuple(p for p in args.peer if p.strip().lower() != "none")
    preset = replace(
        base,
        instances=instances,
        policies=args.policies if args.policies is not None else base.policies,
        peers=peers,
        sessions=args.sessions if args.sessions is not None else base.sessions,
        rate=args.knee_start if args.knee_start is not None else base.rate / base.instances * instances,
        time_scale=args.time_scale if args.time_scale is not None else base.time_scale,
        token_scale=args.token_scale if args.token_scale is not None else base.token_scale,
        token_cost=args.token_cost if args.token_cost is not None else base.token_cost,
        duration_s=args.duration if args.duration is not None else base.duration_s,
        seeds=args.seeds if args.seeds is not None else base.seeds,
        drain_s=args.drain_timeout if args.drain_timeout is not None else base.drain_s,
        global_tier=args.global_tier if args.global_tier is not None else base.global_tier,
        rates=parse_rates(args) or (base.rates if args.knee_start is None else ()),
        picker_units=args.picker_units or base.picker_units,
        concurrent_rows=base.concurrent_rows if args.concurrent_rows is None else args.concurrent_rows,
    )
    # the preset's warm-up keeps its share of the window when --duration changes the window
    share = base.warmup_s / base.duration_s if base.duration_s > 0 else 0.0
    preset = replace(preset, warmup_s=args.warmup if args.warmup is not None else share * preset.duration_s)
    if preset.instances < 1:
        raise BenchError("--instances must be >= 1")
    for peer in preset.peers:
        check_peer(peer)
    if not preset.time_scale > 0 or not 0 < preset.token_scale <= 1 or not preset.rate > 0:
        raise BenchError("--time-scale and --knee-start must be > 0 and --token-scale in (0, 1]")
    if not 1 <= preset.seeds <= 20 or preset.sessions < 0 or not preset.duration_s > 0:
        raise BenchError("--seeds must be in [1, 20], --sessions >= 1 and --duration > 0")
    if not (math.isfinite(preset.warmup_s) and preset.warmup_s >= 0):
        raise BenchError("--warmup must be a finite number of model seconds >= 0")
    if preset.sessions and preset.arrivals != "cold":
        raise BenchError(
            f"--sessions sets the sampled families of --arrivals cold; with {preset.arrivals} the rate sets the load"
        )
    unknown = [p for p in split_names(preset.policies) if p not in known_policies()]
    if unknown:
        raise BenchError(f"unknown policy {', '.join(unknown)}; known: {', '.join(known_policies())}")
    return preset


def split_names(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def token_counter() -> TokenCount:
    """The emulator's default tokenizer (deterministic fallback), so sizes match its usage counts."""
    from smetric.core.tokenizer import FallbackTokenizer

    tok = FallbackTokenizer()
    return lambda text: len(tok.encode(text))


def peer_available() -> bool:
    return bool(
        shutil.which("vllm-router", path=str(Path(sys.executable).parent)) or shutil.which("vllm-router")
    )
