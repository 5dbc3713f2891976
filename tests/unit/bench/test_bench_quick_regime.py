"""`smetric bench --quick` lands where routing decides the SLOs.

The quick preset runs without a global KV tier, tokens x1/8 and a 240 model-second window; the
old one (tokens x1/16, full tier, 60 s) tied every router because no session survived a think
time in any local tier and a miss was a cheap reload. These tests pin the configuration and the
properties it was chosen for, and check smetric.bench.quick_regime's estimate on a hand-made plan.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from smetric.bench import cli, quick_regime
from smetric.bench.plan import PlannedFamily, PlannedRequest, PlannedSession, ReplayPlan
from smetric.core.presets import get_preset


def _module() -> ModuleType:
    return quick_regime


def _parse(*argv: str) -> cli.Preset:
    return cli.resolve(cli.build_parser().parse_args([*argv, "--json", "x"]))


def test_quick_runs_with_the_full_global_tier_as_the_full_bench() -> None:
    quick = _parse("--quick")
    assert quick.global_tier == "full" and quick.token_scale == pytest.approx(1 / 8)
    assert _parse("--quick", "--arrivals", "cold").global_tier == "none"  # the cold preset's
    assert quick.token_cost == "preserved" and quick.token_cost_scale == pytest.approx(8.0)
    assert quick.duration_s == 1000 and quick.time_scale == pytest.approx(0.02)
    assert quick.rate == pytest.approx(0.005) and quick.seeds == 2
    # three fixed load points (12, 17 and 24 agents: where the best router's attainment has fallen
    # and two past it), no search
    assert quick.rates == (0.00128, 0.00181, 0.00256) and quick.arrivals == "agents"
    assert quick.warmup_s == 1500
    assert _parse("--quick", "--arrivals", "cold").rates == (0.005, 0.007)  # the cold preset's
    assert _parse("--quick", "--rates", "0.3").rates == (0.3,)
    assert _parse("--quick", "--knee-start", "0.2").rates == ()  # --knee-start asks for the search
    assert _parse().rates == ()  # the full bench finds the knee
    assert quick.peers == ("vllm-router:cache_aware",) and quick.policies == "smetric,lmetric"
    assert quick.duration_s * quick.time_scale == pytest.approx(20.0)  # wall seconds per window
    full = _parse()
    assert full.global_tier == "full" and full.token_scale == pytest.approx(1 / 16)
    assert full.token_cost == "scaled" and full.token_cost_scale == 1.0
    assert _parse("--token-cost", "preserved").token_cost_scale == pytest.approx(16.0)
    assert _parse("--quick", "--token-cost", "scaled").token_cost_scale == 1.0
    # --global-tier overrides either preset
    assert _parse("--quick", "--global-tier", "none").global_tier == "none"
    assert _parse("--global-tier", "small").global_tier == "small"


def test_quick_makes_a_local_miss_cost_the_slo_and_a_hit_keep_it() -> None:
    """With the cost preserved (each x1/8 token costs as 8 modelled ones) a median follow-up
    recomputed from scratch misses its TTFT SLO on an idle instance; served from the local tier
    (2 % new tokens, a tool result) it meets it. With the cost of the scaled tokens as they are, at
    x1/16 the recompute met it too, so the old quick's routers differed only in reload time."""
    inst = get_preset("qwen3-30b-h20")
    median_prompt = 95_111  # median prompt of the requests the bench replays (those that fit one instance)
    k = cli.QUICK.token_cost_scale

    def ttft_slo_s(modelled_tokens: float) -> float:
        return inst.slo.ttft_base_s + inst.slo.ttft_per_ktok_s * modelled_tokens / 1000.0

    prompt = median_prompt * cli.QUICK.token_scale
    assert inst.cost_model.cost(prompt * k, prompt * k) > ttft_slo_s(prompt * k)
    assert inst.cost_model.cost(0.02 * prompt * k, prompt * k) < ttft_slo_s(prompt * k)
    old = median_prompt / 16  # the old quick: x1/16, scaled cost
    assert inst.cost_model.cost(old, old) < ttft_slo_s(old)


def _request(turn: int, offset_s: float, prompt: int) -> PlannedRequest:
    return PlannedRequest("s", turn, offset_s, 0.0, prompt, 1, 0, False, turn)


def test_window_stats_counts_first_turns_gaps_and_busy_fractions() -> None:
    mod = _module()
    session = PlannedSession(
        "s", "f", None, (_request(0, 0.0, 100), _request(1, 10.0, 150), _request(2, 30.0, 200))
    )
    plan = ReplayPlan((PlannedFamily("f", 0.0, (session,)),), 1.0)

    def cost(n: float, prompt: float) -> float:  # 1 s per uncached token: easy to check
        return float(n)

    w = mod.window_stats(
        plan, cost, fetch_s_per_token=0.5, capacity_tokens=1000, instances=1, window_s=1000.0
    )
    assert w.first_turn_share == pytest.approx(1 / 3) and w.active_sessions == 1
    # closed loop: turn 1 waits for turn 0 (100 s of prefill + one decode step), turn 2 for turn 1
    assert w.reuse_gap_p50_s == pytest.approx((100.005 + 50.005) / 2)
    assert w.busy_hit == pytest.approx((100 + 50 + 50) / 1000)
    assert w.busy_miss_recompute == pytest.approx((100 + 150 + 200) / 1000)
    assert w.busy_miss_reload == pytest.approx((100 + (50 + 100 * 0.5) + (50 + 150 * 0.5)) / 1000)
    assert w.lru_lifetime_s == pytest.approx(1000 / (450 / 1000))
    assert w.sessions_fit == pytest.approx(1000 / 150)
    # requests sent at or after the window's end are left out
    assert mod.window_stats(plan, cost, 0.5, 1000, 1, window_s=120.0).requests_per_s == pytest.approx(2 / 120)
    # a warm-up leaves the first turn out of the window
    late = mod.window_stats(plan, cost, 0.5, 1000, 1, window_s=1000.0, warmup_s=50.0)
    assert late.first_turn_share == 0.0 and late.requests_per_s == pytest.approx(2 / 1000)


def test_compare_sim_runs_the_simulator_with_the_bench_presets_global_tier(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """--compare-sim must simulate the tier the bench ran (here small), not the parser's default, and
    the bench picker's scrape interval in model time."""
    from types import SimpleNamespace

    from rich.console import Console

    from smetric.bench import compare
    from smetric.bench.sweep import Row

    seen: list[list[str]] = []

    def fake_simulator(argv: list[str], out: Path) -> list[dict[str, object]]:
        seen.append(argv)
        return [
            {"policy": p, "tps_within_slo": tps, "slo_attainment": 0.95, "seed": 0, "rate_multiplier": 1.0}
            for p, tps in (("smetric", 10.0), ("lmetric", 12.0))
        ]

    monkeypatch.setattr(compare, "run_simulator", fake_simulator)
    rows = [
        Row(p, "envoy+smetric-epp", p, "ok", "", 0.125, "knee", (0,), {"tps_within_slo": tps}, ())
        for p, tps in (("smetric", 12.0), ("lmetric", 15.0))
    ]
    args = cli.build_parser().parse_args(
        ["--quick", "--global-tier", "small", "--json", str(tmp_path / "b.json")]
    )
    bench = SimpleNamespace(
        knee=0.125,
        meta={"runs": [{"rate": 0.125, "families": 30}], "trace": "t.jsonl.gz", "seeds": [0, 1]},
        trace=SimpleNamespace(requests=[SimpleNamespace(family_id=str(i)) for i in range(60)]),
        preset=cli.resolve(args),
        args=args,
    )
    out = compare.compare_with_simulator(bench, rows, Console(file=None, quiet=True))  # type: ignore[arg-type]
    argv = seen[0]
    assert argv[argv.index("--global-tier") + 1] == "small"
    assert argv[argv.index("--refresh-ms") + 1] == "2500"  # 50 wall ms at time x0.02
    assert argv[argv.index("--subsample") + 1] == "0.5"
    assert out["bench_order"] == ["lmetric", "smetric"] and out["spearman"] == pytest.approx(1.0)
