"""Roofline step-time model: monotonicity, hand-computed numbers, exact decode-stretch sums."""

from __future__ import annotations

import math

import pytest

from smetric.core.presets import PRESETS
from smetric.engine import StepModel

P30 = PRESETS["qwen3-30b-h20"]


@pytest.fixture(scope="module")
def model() -> StepModel:
    return StepModel.from_preset(P30)


def test_expert_split_reproduces_total_and_active_params(model: StepModel) -> None:
    m = P30.model
    total = model.shared_weight_bytes + m.n_experts * model.expert_bytes
    active = model.shared_weight_bytes + m.n_active_experts * model.expert_bytes
    assert total == pytest.approx(m.weight_bytes)
    assert active == pytest.approx(m.active_params_b * 1e9 * m.weight_bytes_per_param)


def test_single_decode_hand_case(model: StepModel) -> None:
    # B=1, 100k context: active weights (3.3 B params x 2 B) + 100k x 96 KiB of KV at 4 TB/s x 0.8
    kv = 100_000 * 2 * 48 * 4 * 128 * 2
    weights = 3.3e9 * 2
    expected = 0.002 + (weights + kv) / (4.0e12 * 0.8)
    assert model.step_s(1, 100_000) == pytest.approx(expected, rel=1e-9)


def test_weight_bytes_grow_with_batch_and_saturate(model: StepModel) -> None:
    sizes = [model.weight_bytes(b) for b in (1, 2, 8, 64, 1024)]
    assert sizes == sorted(sizes)
    assert sizes[-1] == pytest.approx(P30.model.weight_bytes, rel=1e-6)


@pytest.mark.parametrize("arg", ["batch", "context", "prefill"])
def test_step_time_monotone(model: StepModel, arg: str) -> None:
    prev = -1.0
    for x in (1, 4, 16, 64, 256):
        if arg == "batch":
            t = model.step_s(x, 10_000)
        elif arg == "context":
            t = model.step_s(4, x * 1_000)
        else:
            t = model.step_s(4, 10_000, x * 32, 0, model.chunk_s(0, x * 32))
        assert t > prev
        prev = t


def test_prefill_chunk_is_cost_model(model: StepModel) -> None:
    cm = P30.cost_model
    assert model.chunk_s(50_000, 2_000) == pytest.approx(cm.cost(2_000, 52_000))


def test_decode_stretch_equals_step_by_step_sum(model: StepModel) -> None:
    for n_dec, ctx, k in ((1, 1_000, 1), (3, 150_000, 500), (200, 20_000, 50), (1, 0, 10)):
        loop = sum(model.step_s(n_dec, ctx + j * n_dec) for j in range(k))
        assert model.decode_stretch_s(n_dec, ctx, k) == pytest.approx(loop, rel=1e-9)


def test_empty_step_costs_nothing(model: StepModel) -> None:
    assert model.step_s(0, 0) == 0.0
    assert model.decode_stretch_s(0, 0, 5) == 0.0
    assert math.isfinite(model.step_s(1, 0))
