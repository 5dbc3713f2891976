"""The bench's presets: the default (``FULL``) and ``--quick`` (``QUICK``); docs/bench.md says why
each is configured as it is. ``smetric bench`` flags override single fields (``cli.resolve``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

DEFAULT_POLICIES = "smetric,lmetric,bailian,llmd-session,preble,dynamo,load-balance"


@dataclass(frozen=True, slots=True)
class Preset:
    instances: int
    policies: str
    peers: tuple[str, ...]
    sessions: int  # 0 = rate x window families (capped by the trace)
    rate: float  # start of the knee search: session families per model second
    time_scale: float
    token_scale: float
    duration_s: float  # model seconds
    seeds: int
    drain_s: float  # wall seconds for in-flight requests after the window
    global_tier: str = "full"  # the emulator's cluster-wide KV tier: none | small | full
    rates: tuple[float, ...] = ()  # fixed rates (empty = find the knee); --rates/--knee-start override
    # "preserved": each scaled token stands for 1/token_scale modelled tokens (the emulator charges
    # time as for the full-size request; smetric.engine.roofline); "scaled": the engine times the
    # scaled tokens as they are (a request costs ~1/token_scale^2 less, attention is quadratic)
    token_cost: str = "scaled"
    # who starts families (smetric simulate's --arrivals): "agents" = steady agents (the default),
    # "stationary" = Poisson starts also before t = 0, "cold" = Poisson starts from t = 0, each
    # sampled family once (the bench before steady agents)
    arrivals: str = "agents"
    warmup_s: float = 0.0  # model seconds replayed before the measured window
    # the durations the pickers are configured with: "model" seconds as deployed, or "wall" (x the
    # time scale, the units of the prefill speed they learn; docs/bench.md, Limits)
    picker_units: str = "model"
    # run a (rate, seed) cell's rows side by side, each its own cluster and router, one client
    # process (the same plan, the same box conditions); False: one after the other
    concurrent_rows: bool = False

    @property
    def token_cost_scale(self) -> float:
        return 1.0 / self.token_scale if self.token_cost == "preserved" else 1.0


# FULL_COLD and QUICK_COLD (--arrivals cold): session families arrive as a Poisson process at the
# rate over the whole window, so the rate sets the load; the sessions are closed loops, so the load
# builds up over the window. The knee search walks a x sqrt(2) ladder either way from its start; FULL starts at
# 1.41 families per model second for 8 instances (first set from the first quick preset's knee,
# 4 instances between 1.0 and 1.41, 2026-12-01 on the shared box), other instance counts at the
# same rate per instance.
# QUICK runs where a cache miss costs the SLO; docs/bench.md ("Why --quick is configured this way")
# gives the numbers (smetric.bench.quick_regime). With tokens x1/16 and the full global tier each
# instance had ~40 active sessions at the knee for ~4 that fit its scaled KV, and a miss was a cheap
# reload: the routers tied (README 7). So: no global tier (README 4b's tier-none regime; plain vLLM),
# tokens x1/8 (a recompute from scratch then misses its TTFT SLO for 70 % of the requests; 100 % at
# full size, 17 % at x1/16), a 240 model-second window (fewer first turns) at time x0.025, and two
# fixed rates: the window's first turns cap attainment near 88-91 % at any load, so the 90 % knee
# rule has no stable crossing; 0.125 is where attainment starts to fall (a search from 0.25 found
# it, 2026-12-01), 0.177 one rung past. <= 3 min on 2 cores: 12 rows of ~12 s. Drain: 4-10 wall
# s after the window; requests cut then count as failed (SLO misses).
FULL_COLD = Preset(
    8, DEFAULT_POLICIES, ("vllm-router:cache_aware",), 0, 1.41, 0.1, 1 / 16, 120.0, 3, 10.0, arrivals="cold"
)  # fmt: skip
QUICK_COLD = Preset(
    4, "smetric,lmetric", ("vllm-router:cache_aware",), 0, 0.005, 0.002, 1 / 8, 4800.0, 2, 4.0, "none", (0.005, 0.007),
    "preserved", "cold",
)  # fmt: skip
# FULL and QUICK (the default --arrivals agents; stationary uses the same numbers): the rate is
# round(rate x mean family duration) steady agents (smetric.trace.agents_for_rate, ~9,390 s for the
# families that fit one instance), who join over the first half of a warm-up of half the window.
# QUICK: a knee search from 0.0035 (docs/bench.md, "Steady load") had the best row at 3 % SLO
# attainment there (33 agents) and below 90 % down to 0.000875 (8 agents, 77 %): without a global
# tier 4 instances hold ~2 agents' sessions each, and every session that does not fit recomputes its
# whole context. Its rates are that rung and the next. FULL's knee start is not measured: it is the
# rate whose agents send about as many requests per second as the cold FULL preset's knee did
# (~15 per model second for 8 instances), the most the shared 2 cores were seen to drive.
# QUICK runs the pool SMetric is for: the full global tier (LMCache + Mooncake, sync
# loads, the operator's default loadMode; the emulator's tier is the engine model's, as the
# simulator's). Time x0.02 with the pickers in wall units (their SLOs, decode step, fetch time and
# flow control's TTL x the time scale), so the pickers' scrape interval is 2.5 model s and the
# bench's closed loop spends under a model second per request outside the engine (at the earlier
# x0.002 it spent 64-188, so agents sent a fifth of their requests; docs/bench.md, "In wall units").
# Ten times the wall time per model second fits ~5 minutes only with the three rows of a cell run
# side by side (about half the two cores) and a shorter window: 1,000 model s after a warm-up of
# 1,500 (agents join over its first half; with 1,000 the load still climbed through the window,
# drift +44 to +95 % at 17 agents; with 2,000, -18 to +40 % but 6.6 min). The three load points,
# checked on seeds 0 and 1 (docs/bench.md, "The main job"): 12 agents, where the best row's SLO
# attainment falls under 90 %, to 24, the most the box drives with the router's hop under ~10 % of
# a median request's TTFT SLO (at 34 agents it took 38-50 wall ms, 2-2.5 model s).
QUICK_AGENTS_RATES = (0.00128, 0.00181, 0.00256)
FULL_AGENTS_KNEE_START = 0.2
FULL = replace(FULL_COLD, arrivals="agents", rate=FULL_AGENTS_KNEE_START, warmup_s=60.0)
QUICK = replace(
    QUICK_COLD, arrivals="agents", rates=QUICK_AGENTS_RATES, global_tier="full", time_scale=0.02,
    duration_s=1000.0, warmup_s=1500.0, picker_units="wall", concurrent_rows=True,
)  # fmt: skip
# the --quick of 4 Dec 2026 (time x0.002, pickers in model units, rows one after the other), which
# the differential harness's documented runs used: it pins these fields in its bench command
QUICK_X0002 = {"--time-scale": "0.002", "--duration": "4800", "--warmup": "1200", "--picker-units": "model"}


def preset_for(quick: bool, arrivals: str) -> Preset:
    """The preset of ``--quick`` (or not) for these arrivals (``stationary`` uses the agents' one)."""
    if arrivals == "cold":
        return QUICK_COLD if quick else FULL_COLD
    return replace(QUICK if quick else FULL, arrivals=arrivals)
