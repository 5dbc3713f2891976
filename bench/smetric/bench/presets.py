"""The bench's presets: the default (``FULL``) and ``--quick`` (``QUICK``); docs/bench.md says why
each is configured as it is. ``smetric bench`` flags override single fields (``cli.resolve``)."""

from __future__ import annotations

from dataclasses import dataclass

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

    @property
    def token_cost_scale(self) -> float:
        return 1.0 / self.token_scale if self.token_cost == "preserved" else 1.0


# Load: session families arrive as a Poisson process at the rate over the whole window (as in the
# simulator), so the rate sets the load; the sessions are closed loops, so the load builds up over
# the window. The knee search walks a x sqrt(2) ladder either way from its start; FULL starts at
# 1.41 families per model second for 8 instances (first set from the first quick preset's knee,
# 4 instances between 1.0 and 1.41, 2026-12-01 on the shared box), other instance counts at the
# same rate per instance.
# QUICK runs where a cache miss costs the SLO; docs/bench.md ("Why --quick is configured this way")
# gives the numbers (bench/quick_regime.py). With tokens x1/16 and the full global tier each
# instance had ~40 active sessions at the knee for ~4 that fit its scaled KV, and a miss was a cheap
# reload: the routers tied (README 7). So: no global tier (README 4b's tier-none regime; plain vLLM),
# tokens x1/8 (a recompute from scratch then misses its TTFT SLO for 70 % of the requests; 100 % at
# full size, 17 % at x1/16), a 240 model-second window (fewer first turns) at time x0.025, and two
# fixed rates: the window's first turns cap attainment near 88-91 % at any load, so the 90 % knee
# rule has no stable crossing; 0.125 is where attainment starts to fall (a search from 0.25 found
# it, 2026-12-01), 0.177 one rung past. <= 3 min on 2 cores: 12 rows of ~12 s. Drain: 4-10 wall
# s after the window; requests cut then count as failed (SLO misses).
FULL = Preset(8, DEFAULT_POLICIES, ("vllm-router:cache_aware",), 0, 1.41, 0.1, 1 / 16, 120.0, 3, 10.0)
QUICK = Preset(
    4, "smetric,lmetric", ("vllm-router:cache_aware",), 0, 0.005, 0.002, 1 / 8, 4800.0, 2, 4.0, "none", (0.005, 0.007),
    "preserved",
)  # fmt: skip
