"""Cost-preserving token scale: a scaled token costs the engine, the global tier, the picker's
cost model and the bench's SLO check what ``k`` modelled tokens cost (smetric.engine.roofline)."""

from __future__ import annotations

import math

import pytest

from smetric.bench.metrics import meets_slo, summarise
from smetric.bench.replay import Outcome, RequestRecord
from smetric.bench.stacks import picker_parameters
from smetric.core.presets import PRESETS
from smetric.emulator.cli import config_from_args
from smetric.emulator.config import EmulatorConfig
from smetric.engine import EngineConfig, EngineEvent, EngineRequest, Instance, StepModel, make_global_tier
from smetric.policy import DecodeStepModel
from smetric.policy.params_mapping import params_from_mapping

P30 = PRESETS["qwen3-30b-h20"]
PLAIN = StepModel.from_preset(P30)
K = 8.0
SCALED = PLAIN.token_scaled(K)


def test_one_is_the_plain_model_and_below_one_is_rejected() -> None:
    assert PLAIN.token_scaled(1.0) == PLAIN
    with pytest.raises(ValueError, match=">= 1"):
        PLAIN.token_scaled(0.5)


def test_a_chunk_costs_its_modelled_token_range() -> None:
    assert SCALED.chunk_s(1000, 512) == pytest.approx(P30.cost_model.chunk_cost(8000, 4096))


def test_a_decode_stretch_is_k_times_as_many_real_steps_over_k_times_the_context() -> None:
    assert SCALED.decode_stretch_s(4, 40_000, 100) == pytest.approx(PLAIN.decode_stretch_s(4, 320_000, 800))


def test_a_scaled_step_is_k_real_steps_with_the_same_chunk() -> None:
    cost = SCALED.chunk_s(2000, 1024)
    real = PLAIN.step_s(3, 3 * 16_000 * K, 1024, 2000 * K, cost / K)
    assert SCALED.step_s(3, 3 * 16_000, 1024, 2000, cost) == pytest.approx(K * real)


def _ttft(model: StepModel, prompt: int, block: int) -> float:
    cfg = EngineConfig(block, 200_000 // block, P30.max_num_batched_tokens, P30.max_num_seqs)
    inst = Instance("i", model, cfg, None, None)
    inst.submit(EngineRequest("r", prompt, 4, ((0, prompt // block - 1),)), 0.0)
    events: list[EngineEvent] = []
    while not any(e.kind == "first_token" for e in events):
        events += inst.advance(inst.next_event_s())
    return next(e.timing.ttft_s for e in events if e.kind == "first_token")


def test_an_engine_prefills_a_scaled_prompt_in_about_the_full_size_time() -> None:
    full = _ttft(PLAIN, 65_536, 16)  # eight 8192-token chunks
    scaled = _ttft(SCALED, 8_192, 2)  # one chunk standing for the same 65,536 tokens
    assert scaled == pytest.approx(full, rel=0.02)
    assert _ttft(PLAIN, 8_192, 16) < full / 10  # what the scaled prompt costs as it is


def test_the_global_tier_moves_k_times_the_bytes_per_block() -> None:
    plain = make_global_tier("full", P30, 4, 16)
    scaled = make_global_tier("full", P30, 4, 16, token_cost_scale=K)
    assert plain is not None and scaled is not None
    assert scaled.block_bytes == pytest.approx(K * plain.block_bytes)


def test_the_emulator_takes_the_scale_from_its_flag_and_rejects_below_one() -> None:
    assert config_from_args(["--token-cost-scale", "8"]).token_cost_scale == 8.0
    assert config_from_args([]).token_cost_scale == 1.0
    with pytest.raises(ValueError, match="token-cost-scale"):
        EmulatorConfig(token_cost_scale=0.5)


def test_the_picker_is_told_the_same_costs_and_slo() -> None:
    assert picker_parameters("qwen3-30b-h20", 1.0) == {}
    params = params_from_mapping(picker_parameters("qwen3-30b-h20", K))
    for n, prompt in ((100, 1000), (1000, 12_000), (12_000, 12_000)):
        assert params.cost_model.cost(n, prompt) == pytest.approx(P30.cost_model.cost(K * n, K * prompt))
    assert params.slo.ttft_slo_s(12_000) == pytest.approx(P30.slo.ttft_slo_s(int(K * 12_000)))
    assert params.slo.tpot_s == pytest.approx(K * P30.slo.tpot_s)
    step = DecodeStepModel.from_preset_name("qwen3-30b-h20")
    # one scaled output token = K real decode steps over K x the context
    assert params.decode_step.base_s + params.decode_step.per_kv_token_s * 50_000 == pytest.approx(
        K * (step.base_s + step.per_kv_token_s * K * 50_000)
    )


def test_the_bench_checks_the_slo_of_the_modelled_prompt_and_tpot_per_modelled_token() -> None:
    slo = P30.slo
    prompt = 12_000  # scaled tokens: 96,000 modelled at K = 8
    ttft = slo.ttft_slo_s(prompt) + 1.0  # misses the SLO of the scaled prompt, meets the modelled one's
    gap = 2.0 * slo.tpot_s  # per scaled token: K modelled tokens, so well within the TPOT SLO
    outcome = Outcome(
        ok=True, status=200, ttft_s=ttft, e2e_s=ttft + gap * 9, output_tokens=10, prompt_tokens=prompt
    )
    record = RequestRecord("s", "f", 1, 0.0, 0.0, prompt, 10, outcome)
    assert meets_slo(record, slo, 1.0, "all_scaled") == (False, False)
    assert meets_slo(record, slo.token_scaled(K), 1.0, "all_scaled") == (True, True)
    assert ttft > slo.ttft_slo_s(prompt) and not math.isnan(ttft)


def test_tps_counts_modelled_tokens() -> None:
    outcome = Outcome(ok=True, status=200, ttft_s=0.5, e2e_s=0.6, output_tokens=10, prompt_tokens=100)
    records = [RequestRecord("s", "f", 0, 0.0, 0.0, 100, 10, outcome)]
    plain = summarise(records, 0, P30.slo, 1.0, [], None)
    scaled = summarise(records, 0, P30.slo, 1.0, [], None, token_cost_scale=K)
    assert scaled.tps_total == pytest.approx(K * plain.tps_total)
    assert scaled.tps_within_slo == pytest.approx(K * plain.tps_within_slo) and plain.tps_within_slo > 0


def test_the_picker_knows_the_global_tier_the_simulator_knows() -> None:
    """With a global tier the bench's picker gets globalFetchSPerToken (per scaled token: K tokens'
    KV), as the operator renders it and as the simulator's picker has it; without one, none."""
    from smetric.sim.config import SimConfig
    from smetric.sim.simulator import policy_params

    sim = policy_params(SimConfig(instances=4, global_tier="full"), P30, 16).global_fetch_s_per_token
    assert sim is not None
    for k in (1.0, K):
        fetch = params_from_mapping(picker_parameters("qwen3-30b-h20", k, True)).global_fetch_s_per_token
        assert fetch == pytest.approx(k * sim)
        assert params_from_mapping(picker_parameters("qwen3-30b-h20", k)).global_fetch_s_per_token is None
