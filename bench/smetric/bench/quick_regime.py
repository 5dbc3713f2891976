"""Where does a bench configuration land? A plan-level estimate, before spending bench time.

    python -m smetric.bench.quick_regime --rates 1,2,2.83                          # the old --quick (x1/16, full tier)
    python -m smetric.bench.quick_regime --quick --token-cost scaled --duration 240 --rates 0.088,0.125,0.177  # the previous one
    python -m smetric.bench.quick_regime --quick --rates 0.0035,0.005,0.007        # today's --quick (cost preserved)

For each rate it replays the bench's own plan (same families, start times and scaled tokens as
`smetric bench` with that seed) with queue-free response times from the preset's cost model and
prints, per instance over the measured window: requests per model second, the share of first
turns (no router can serve those from a cache), active sessions vs sessions that fit the scaled KV
pool, the LRU lifetime of a block (scaled KV capacity / prompt tokens touched per second) vs the
median reuse gap of a session, and the engine's busy fraction if every follow-up hits its session
in the local tier vs if every follow-up misses it (no global tier: recompute from scratch; full
tier: reload from the tier). Routing can only matter where the lifetime is at least the reuse gap
and the hit and miss columns differ; docs/bench.md ("Why --quick is configured this way") quotes
the output. An estimate: no queueing, no batching, the trace's think times as recorded.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from smetric.bench import cli
from smetric.bench.plan import ReplayPlan

DECODE_S_PER_TOKEN = 0.005  # queue-free decode step of one sequence (model s), order of the TPOT p50


@dataclass(frozen=True, slots=True)
class WindowStats:
    requests_per_s: float  # per instance
    first_turn_share: float
    active_sessions: float  # per instance
    sessions_fit: float  # scaled KV capacity / mean prompt of the window
    lru_lifetime_s: float
    reuse_gap_p50_s: float
    busy_hit: float  # engine busy fraction per instance: every follow-up hits locally
    busy_miss_recompute: float  # ... every follow-up recomputes its whole prompt (no global tier)
    busy_miss_reload: float  # ... every follow-up reloads its cached prefix from a global tier


def window_stats(
    plan: ReplayPlan,
    cost_s: Callable[[float, float], float],
    fetch_s_per_token: float,
    capacity_tokens: int,
    instances: int,
    window_s: float,
    warmup_s: float = 0.0,
    decode_s_per_token: float = DECODE_S_PER_TOKEN,
) -> WindowStats:
    """The plan's requests sent in ``[warmup_s, warmup_s + window_s)`` with queue-free responses.

    ``cost_s(n_new, prompt)`` is the prefill time of ``n_new`` uncached tokens of a ``prompt``-token
    prompt (the engine's cost model, in the plan's scaled tokens)."""
    end = warmup_s + window_s
    rows: list[tuple[str, bool, int, float | None, float, float, float]] = []
    for family in plan.families:
        for session in family.sessions:
            prev_done: float | None = None
            prev_sent = prev_prompt = 0.0
            for r in session.requests:
                open_loop = family.start_s + r.offset_s
                t = open_loop if prev_done is None else max(open_loop, prev_done + r.think_time_s)
                if t >= end:
                    break
                first = prev_done is None
                new = r.prompt_tokens if first else max(r.prompt_tokens - prev_prompt, 1)
                hit = cost_s(new, r.prompt_tokens)
                recompute = cost_s(r.prompt_tokens, r.prompt_tokens)
                reload = hit if first else hit + (r.prompt_tokens - new) * fetch_s_per_token
                gap = None if first else t - prev_sent
                if t >= warmup_s:
                    rows.append((session.session_id, first, r.prompt_tokens, gap, hit, recompute, reload))
                prev_done = t + hit + decode_s_per_token * r.output_tokens
                prev_sent, prev_prompt = t, r.prompt_tokens
    per = window_s * instances
    n = len(rows)
    tokens = sum(x[2] for x in rows)
    gaps = [x[3] for x in rows if x[3] is not None]
    mean_prompt = tokens / n if n else float("nan")
    return WindowStats(
        requests_per_s=n / per,
        first_turn_share=sum(1 for x in rows if x[1]) / n if n else float("nan"),
        active_sessions=len({x[0] for x in rows}) / instances,
        sessions_fit=capacity_tokens / mean_prompt if n else float("nan"),
        lru_lifetime_s=capacity_tokens / (tokens / per) if tokens else float("inf"),
        reuse_gap_p50_s=statistics.median(gaps) if gaps else float("nan"),
        busy_hit=sum(x[4] for x in rows) / per,
        busy_miss_recompute=sum(x[5] for x in rows) / per,
        busy_miss_reload=sum(x[6] for x in rows) / per,
    )


def main() -> None:
    from smetric.core.presets import get_preset

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the --quick preset (default: the old quick)")
    ap.add_argument("--rates", default="0.5,1,1.41,2,2.83")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--token-scale", type=float, help="default: the preset's")
    ap.add_argument("--token-cost", choices=("preserved", "scaled"), help="default: the preset's")
    ap.add_argument("--duration", type=float, help="measured window, model s (default: the preset's)")
    ap.add_argument("--warmup", type=float, default=0.0, help="model s before the window (not measured)")
    ap.add_argument("--instances", type=int, default=4)
    ap.add_argument("--preset", default="qwen3-30b-h20")
    a = ap.parse_args()
    # the cold plan (sampled families, Poisson starts from 0): the regime these tables describe
    argv = [
        "--json",
        "/dev/null",
        "--quick",
        "--arrivals",
        "cold",
        "--preset",
        a.preset,
        "--instances",
        str(a.instances),
    ]
    if not a.quick:  # the older --quick preset: tokens x1/16 at their own cost, 60 s
        argv += ["--token-scale", "0.0625", "--duration", "60", "--token-cost", "scaled"]
    if a.token_scale is not None:
        argv += ["--token-scale", str(a.token_scale)]
    if a.duration is not None:
        argv += ["--duration", str(a.duration)]
    if a.token_cost is not None:
        argv += ["--token-cost", a.token_cost]
    args = cli.build_parser().parse_args(argv)
    preset = cli.resolve(args)
    window_s = preset.duration_s
    preset = cli.replace(preset, duration_s=window_s + a.warmup)  # families arrive over both
    trace = cli.load_trace(cli.find_trace(None), a.preset)
    inst = get_preset(a.preset)
    capacity = cli.scaled_kv_capacity(args, preset)
    k = preset.token_cost_scale  # modelled tokens per scaled token (1 = the engine times scaled tokens)
    print(
        f"{a.preset}, {a.instances} instances, tokens x{preset.token_scale:g} (cost {preset.token_cost}; KV {capacity} tokens per "
        f"instance), window {window_s:g} model s after {a.warmup:g} s of warm-up"
    )
    print(
        "rate   seed  req/s/inst first  sessions/inst fit  LRU life s  gap p50 s  busy: hit  recompute  reload"
    )
    for rate in (float(x) for x in a.rates.split(",")):
        for seed in (int(x) for x in a.seeds.split(",")):
            plan, _ = cli.make_plan(trace, args, preset, rate, seed)
            assert isinstance(plan, ReplayPlan)  # --arrivals cold
            w = window_stats(
                plan,
                inst.cost_model.token_scaled(k).cost,
                inst.global_fetch_s_per_token * k,
                capacity,
                a.instances,
                window_s,
                a.warmup,
                DECODE_S_PER_TOKEN * k,
            )
            print(
                f"{rate:<6g} {seed:<5d} {w.requests_per_s:10.2f} {w.first_turn_share:5.0%} {w.active_sessions:13.1f} "
                f"{w.sessions_fit:4.1f} {w.lru_lifetime_s:11.1f} {w.reuse_gap_p50_s:10.1f} {w.busy_hit:10.2f} "
                f"{w.busy_miss_recompute:10.2f} {w.busy_miss_reload:7.2f}"
            )


if __name__ == "__main__":
    main()
