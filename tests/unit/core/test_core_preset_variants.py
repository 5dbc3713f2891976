"""Deployment variants of a preset (FP8 KV, tensor parallelism, GPU kind, HBM) and the calibrated
global-tier throughput the router's fetch estimate comes from."""

from __future__ import annotations

import pytest

from smetric.core.presets import PRESETS, get_preset, variant_name
from smetric.engine import StepModel
from smetric.sim.simulator import SimConfig, policy_params
from smetric.sim.workload import max_request_tokens

BASE = "qwen3-30b-h20"
P30 = PRESETS[BASE]


def test_variant_names_round_trip_and_the_base_is_itself() -> None:
    assert variant_name(BASE) == BASE and get_preset(BASE) is P30
    name = variant_name(BASE, kv_dtype="fp8", tp=2, gpu="h200", hbm_gb=141)
    assert name == "qwen3-30b-h20/kv=fp8/tp=2/gpu=h200/hbm=141"
    p = get_preset(name)
    assert (p.name, p.n_gpus, p.model.kv_bytes_per_elem, p.gpu.bf16_tflop_s) == (name, 2, 1.0, 989.0)


def test_fp8_kv_halves_bytes_and_doubles_the_pool() -> None:
    fp8 = get_preset(variant_name(BASE, kv_dtype="fp8"))
    assert fp8.model.kv_bytes_per_token == P30.model.kv_bytes_per_token / 2
    assert abs(fp8.kv_capacity_tokens - 2 * P30.kv_capacity_tokens) <= 2 * P30.block_size
    assert fp8.global_fetch_s_per_token == pytest.approx(P30.global_fetch_s_per_token / 2)
    assert fp8.cost_model == P30.cost_model  # prefill compute unchanged (stated assumption)
    # 217,680 tokens of KV on one H20 in bf16; with fp8 the model's 262,144 context is the limit
    assert max_request_tokens(P30) == 217_680
    assert max_request_tokens(fp8) == P30.model.max_context_tokens


def test_tensor_parallel_adds_memory_and_compute_and_pays_all_reduces() -> None:
    tp2 = get_preset(variant_name(BASE, tp=2))
    assert tp2.n_gpus == 2 and tp2.peak_flop_s == 2 * P30.peak_flop_s
    # weights are paid once, so the KV pool more than doubles
    assert tp2.kv_capacity_tokens > 2 * P30.kv_capacity_tokens
    assert tp2.global_fetch_s_per_token == pytest.approx(P30.global_fetch_s_per_token / 2)
    one, two = StepModel.from_preset(P30), StepModel.from_preset(tp2)
    assert one.allreduce_fixed_s == 0.0 and one.allreduce_s_per_token == 0.0
    assert two.allreduce_fixed_s == pytest.approx(2 * 48 * 10e-6)
    # ring all-reduce of 2048 bf16 values per token, 2 per layer, at 450 GB/s per direction
    assert two.allreduce_s_per_token == pytest.approx(96 * 2048 * 2 * 1.0 / 450e9)
    t = 4096
    no_comm = (
        two.step_s(0, 0, t, 0, two.chunk_s(0, t)) - two.allreduce_fixed_s - t * two.allreduce_s_per_token
    )
    assert no_comm == pytest.approx(two.overhead_s + two.chunk_s(0, t), rel=0.05)


def test_hbm_override_keeps_the_gpu_compute() -> None:
    big = get_preset(variant_name(BASE, hbm_gb=141))
    assert big.gpu.hbm_gb == 141 and big.gpu.bf16_tflop_s == P30.gpu.bf16_tflop_s
    assert big.kv_capacity_tokens > 2.5 * P30.kv_capacity_tokens
    assert get_preset(variant_name(BASE, gpu="h20-3e")).gpu.hbm_gb == 141


@pytest.mark.parametrize(
    "name",
    [
        "nope/kv=fp8",
        f"{BASE}/kv=int4",
        f"{BASE}/tp=0",
        f"{BASE}/tp=two",
        f"{BASE}/hbm=-1",
        f"{BASE}/hbm=10",  # the weights do not fit
        f"{BASE}/gpu=a100",
        f"{BASE}/color=red",
        f"{BASE}/kv",
        f"{BASE}/kv=fp8/kv=bf16",
    ],
)
def test_bad_variants_are_rejected(name: str) -> None:
    with pytest.raises(ValueError):
        get_preset(name)


def test_sim_config_carries_the_variant_and_the_calibrated_fetch_estimate() -> None:
    cfg = SimConfig(kv_dtype="fp8", tp=2)
    assert cfg.preset_name == "qwen3-30b-h20/kv=fp8/tp=2"
    preset = get_preset(cfg.preset_name)
    assert cfg.global_load_link_gbit_s(preset) == 120.0  # 2 GPUs x 60 Gb/s, under the NIC
    assert SimConfig(global_load_gbit_s=None).global_load_link_gbit_s(P30) == 200.0  # line rate
    params = policy_params(SimConfig(), P30, 64)
    assert params.global_fetch_s_per_token == pytest.approx(P30.global_fetch_s_per_token)
    assert params.global_fetch_s_per_token == pytest.approx(P30.model.kv_bytes_per_token / 7.5e9)
    with pytest.raises(ValueError):
        SimConfig(global_load_mode="eventually")
    with pytest.raises(ValueError):
        SimConfig(kv_dtype="int4")
