"""Gateway timeouts derived from the longest legitimate silence (smetric.core.gatewaytimeouts)."""

from __future__ import annotations

import pytest

from smetric.core.costmodel import CostModel
from smetric.core.gatewaytimeouts import GatewayTimeouts, default_timeouts, whole_seconds
from smetric.core.presets import PRESETS, get_preset


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("length", [4_096, 131_072, 262_144])
def test_every_timeout_lets_a_retried_max_length_prefill_through(name: str, length: int) -> None:
    preset = PRESETS[name]
    t = GatewayTimeouts.for_preset(preset, length)
    prefill_s = preset.cost_model.cost(length, length)
    assert t.longest_prefill_s == pytest.approx(prefill_s)
    assert t.per_try_idle_s > prefill_s  # an accepted prefill is never reset
    assert t.stream_idle_s >= t.per_try_idle_s + prefill_s  # a retry after a frozen engine still fits
    assert t.route_s >= t.stream_idle_s + 65_536 * preset.slo.tpot_s  # then a long generation


def test_the_default_is_the_default_model_at_full_context() -> None:
    t = default_timeouts()
    assert t.max_model_len == 262_144
    assert 580 < t.longest_prefill_s < 590  # 584 s on one H20 (PolicyParams' cost model)
    assert t.per_try_idle_s > 700


def test_time_scale_scales_every_duration() -> None:
    preset = get_preset("qwen3-30b-h20")
    full, fast = GatewayTimeouts.for_preset(preset), GatewayTimeouts.for_preset(preset, time_scale=0.01)
    for a, b in ((full.per_try_idle_s, fast.per_try_idle_s), (full.stream_idle_s, fast.stream_idle_s),
                 (full.route_s, fast.route_s)):  # fmt: skip
        assert b == pytest.approx(a * 0.01)


def test_longer_or_slower_means_longer_timeouts() -> None:
    slow = CostModel(c_lin_s=2e-4, c_att_s=2e-8)
    fast = CostModel(c_lin_s=1e-4, c_att_s=1e-8)
    assert (
        GatewayTimeouts.derive(slow, 100_000, tpot_s=0.02).per_try_idle_s
        > GatewayTimeouts.derive(fast, 100_000, tpot_s=0.02).per_try_idle_s
    )
    assert (
        GatewayTimeouts.derive(fast, 200_000, tpot_s=0.02).stream_idle_s
        > GatewayTimeouts.derive(fast, 100_000, tpot_s=0.02).stream_idle_s
    )


@pytest.mark.parametrize(
    "kwargs",
    [{"max_model_len": 0}, {"time_scale": 0.0}, {"margin": 0.9}, {"tpot_s": -1.0}],
)
def test_bad_input_is_a_clear_error(kwargs: dict[str, float]) -> None:
    args: dict[str, float] = {"max_model_len": 1000, "tpot_s": 0.02, **kwargs}
    length = int(args.pop("max_model_len"))
    with pytest.raises(ValueError):
        GatewayTimeouts.derive(CostModel(1e-4, 1e-8), length, **args)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no finite prefill"):
        GatewayTimeouts.derive(CostModel(0.0, 0.0), 1000, tpot_s=0.02)


def test_whole_seconds_round_up() -> None:
    assert whole_seconds(730.01) == 731
    assert whole_seconds(0.2) == 1
    assert whole_seconds(12.0) == 12
