"""The bench's picker config in wall units (``smetric bench --picker-units wall``): the picker
learns its prefill speed from wall-clock TTFTs of engines emulated ``1 / time_scale`` times too
fast, so its estimates are wall seconds; its SLOs, decode step and fetch time must be too."""

from __future__ import annotations

from smetric.bench.stacks import ClusterSpec, PickerFrontend, picker_parameters
from smetric.core.presets import get_preset
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy import DecodeStepModel
from smetric.policy.flowcontrol import FlowControlConfig, FlowGate
from smetric.policy.params_mapping import params_from_mapping
from smetric.policy.pickerconfig import validate_config

PRESET = "qwen3-30b-h20"
TS = 0.1  # the bench's default time scale: engines 10x faster than modelled


def test_wall_units_scale_every_duration_but_the_cost_model() -> None:
    model = params_from_mapping(picker_parameters(PRESET, 1.0, True, 1.0) or {"preset": PRESET})
    wall = params_from_mapping(picker_parameters(PRESET, 1.0, True, TS))
    p = get_preset(PRESET)
    assert wall.slo.ttft_base_s == p.slo.ttft_base_s * TS
    assert wall.slo.ttft_per_ktok_s == p.slo.ttft_per_ktok_s * TS and wall.slo.tpot_s == p.slo.tpot_s * TS
    assert wall.global_fetch_s_per_token == model.global_fetch_s_per_token * TS  # type: ignore[operator]
    assert wall.decode_step.base_s == DecodeStepModel.from_preset_name(PRESET).base_s * TS
    assert wall.cost_model == p.cost_model  # cost-model seconds: the learned speed converts them


def test_an_engine_that_misses_in_wall_time_is_refused_only_in_wall_units() -> None:
    """The engine runs 10x fast (learned speed 10) with 5 SLOs' worth of queued cost: 0.5 SLO of
    wall time, five times the wall SLO the bench's clock holds it to. Model units let it pass."""
    request = RequestView("r", 8_000, turn=0)
    slo_s = get_preset(PRESET).slo.ttft_slo_s(8_000)
    busy = EndpointSnapshot(
        "a", queued_prefill_cost=5 * slo_s, queued_prefill_tokens=1_000.0, prefill_speed=10.0
    )
    cfg = FlowControlConfig(enabled=True, tpot_guard=False)
    model = FlowGate(
        cfg, params_from_mapping(picker_parameters(PRESET, 1.0, False, 1.0) or {"preset": PRESET})
    )
    wall = FlowGate(cfg, params_from_mapping(picker_parameters(PRESET, 1.0, False, TS)))
    assert model.has_capacity(request, [busy])  # lenient by 1 / time scale
    assert not wall.has_capacity(request, [busy])


def test_flow_control_in_the_picker_config() -> None:
    """Written either way; the TTL is a wait on the picker's clock, so it is the deployed TTL in
    model time (x the time scale) in both units; Retry-After is the header the clients wait in
    model seconds (ChatClient scales it), so it stays as deployed."""
    spec = ClusterSpec(4, PRESET, TS, 0, 16, "0", "m")
    ttl, retry = FlowControlConfig().ttl_s, FlowControlConfig().retry_after_s
    off = PickerFrontend("smetric", flow_control=False).picker_config(spec)
    assert off["flowControl"] == {
        "enabled": False,
        "ttlS": ttl * TS,
        "retryAfterS": retry,
    }  # off, not left out
    assert validate_config(off).flowControl.enabled is False  # whatever the picker's default
    for units in ("model", "wall"):
        config = PickerFrontend("smetric", units=units).picker_config(spec)
        assert config["flowControl"] == {"enabled": True, "ttlS": ttl * TS, "retryAfterS": retry}, units
        picker = validate_config(config)
        assert picker.flowControl.config().enabled and picker.flowControl.config().ttl_s == ttl * TS


def test_the_summary_reports_sheds_and_give_ups() -> None:
    from smetric.bench.metrics import summarise
    from smetric.bench.replay import Outcome, RequestRecord

    def rec(n: int, outcome: Outcome) -> RequestRecord:
        return RequestRecord(f"s{n}", "f", 0, 0.0, 0.0, 100, 10, outcome)

    served = Outcome(ok=True, status=200, ttft_s=0.5, e2e_s=0.6, output_tokens=10, prompt_tokens=100)
    retried = Outcome(
        ok=True, status=200, ttft_s=3.0, e2e_s=3.1, output_tokens=10, prompt_tokens=100, retries_429=2
    )
    gave_up = Outcome(ok=False, status=429, retries_429=8)
    s = summarise(
        [rec(0, served), rec(1, retried), rec(2, gave_up), rec(3, served)],
        0,
        get_preset(PRESET).slo,
        1.0,
        [],
        None,
    )
    assert s.shed_share == 0.5 and s.gave_up_share == 0.25


def test_the_picker_knows_the_emulated_tiers_size_as_the_operator_renders_it() -> None:
    # a small tier: its capacity over the instances, so the picker's cachedMoves gate sees the same tier as
    # the simulator's policies; a full tier (or none): no segment, a fully provisioned tier
    from smetric.engine.global_tier import tier_capacity_tokens

    for tier in ("none", "full"):
        cfg = PickerFrontend("smetric").picker_config(
            ClusterSpec(4, PRESET, TS, 0, 16, "0", "m", global_tier=tier)
        )
        assert "globalSegmentTokens" not in cfg["policy"]["parameters"]  # type: ignore[index]
    small = ClusterSpec(4, PRESET, TS, 0, 16, "0", "m", global_tier="small", token_cost_scale=0.5)
    cfg = PickerFrontend("smetric").picker_config(small)
    seg = cfg["policy"]["parameters"]["globalSegmentTokens"]  # type: ignore[index]
    total = tier_capacity_tokens("small", get_preset(PRESET), 16, 0.5)
    assert total is not None and seg == total // 4
    assert validate_config(cfg) is not None
    assert params_from_mapping(cfg["policy"]["parameters"]).global_segment_tokens == seg  # type: ignore[index,arg-type]
