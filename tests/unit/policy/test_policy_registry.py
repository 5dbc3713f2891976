"""Registry (make_policy) and params_from_mapping (the YAML/CRD trust boundary)."""

from __future__ import annotations

import pytest

from smetric.core.costmodel import CostModel
from smetric.core.presets import PRESETS
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy import (
    PolicyParams,
    Router,
    fetch_s_per_token,
    known_policies,
    make_policy,
    params_from_mapping,
)
from smetric.policy.bailian import BailianParams
from smetric.policy.base import DecodeStepModel
from smetric.policy.llmd_session import LlmdSessionParams
from smetric.policy.params import ParamsModel, SessionParams, SMetricParams
from smetric.policy.params_mapping import CONTEXT_KEYS, policy_keys
from smetric.policy.preble import PrebleParams
from smetric.policy.registry import POLICY_NAMES, REGISTRY, PolicyEntry
from smetric.policy.smetric import SMetric
from smetric.policy.smetric_overload import OverloadParams


def test_every_catalogued_name_is_registered_and_named() -> None:
    assert known_policies() == POLICY_NAMES
    for name in POLICY_NAMES:
        assert make_policy(name, PolicyParams()).name == name


def test_unknown_policy_lists_known_names() -> None:
    with pytest.raises(ValueError, match=r"unknown routing policy 'nope'.*smetric.*round-robin"):
        make_policy("nope", PolicyParams())


def test_make_policy_returns_fresh_instances() -> None:
    a, b = make_policy("round-robin"), make_policy("round-robin")
    eps = [EndpointSnapshot("x"), EndpointSnapshot("y")]
    r = RequestView("r", 10)
    assert a.pick(r, eps).target == 0
    assert b.pick(r, eps).target == 0


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_policy_runs_under_the_router(name: str) -> None:
    eps = [
        EndpointSnapshot("a", running=2, local_hit_tokens=300),
        EndpointSnapshot("b", stale=True),
        EndpointSnapshot("c"),
    ]
    r = RequestView("r", prompt_tokens=500, turn=1, est_hit_tokens=400, session_id="s")
    d = Router(make_policy(name)).pick(r, eps)
    assert d.target in (0, 2)
    assert 1 not in d.fallbacks


def test_defaults() -> None:
    assert params_from_mapping(None) == PolicyParams()
    assert params_from_mapping({}) == PolicyParams()


def test_camel_and_snake_keys() -> None:
    p = params_from_mapping(
        {
            "slack": 1.5,
            "hitRatio": 0.3,
            "overload": 3,
            "lambda": 0.5,
            "ttftSloBaseS": 2.0,
            "ttftSloPerKTokS": 0.1,
            "tpotSloS": 0.05,
            "costModel": {"cLinS": 1e-4, "cAttS": 1e-8},
            "decodeStep": {"baseS": 0.004, "perKvTokenS": 1e-8},
            "mode": "disaggregated",
            "blockTokens": 32,
            "seed": 3,
            "sessionTableSize": 10,
            "prebleHitFraction": 0.6,
            "prebleImbalanceGuard": 4,
            "globalFetchSPerToken": 4e-6,
        }
    )
    assert (p.get(SMetricParams).slack, p.get(SMetricParams).hit_ratio, p.mode) == (1.5, 0.3, "disaggregated")
    assert p.get(SessionParams).hit_ratio == 0.3  # one key, every model that declares it
    assert (p.get(OverloadParams).overload, p.get(BailianParams).bailian_lambda) == (3.0, 0.5)
    assert (p.slo.ttft_base_s, p.slo.ttft_per_ktok_s, p.slo.tpot_s) == (2.0, 0.1, 0.05)
    assert p.cost_model == CostModel(1e-4, 1e-8)
    assert p.decode_step == DecodeStepModel(0.004, 1e-8)
    assert (p.block_tokens, p.seed) == (32, 3)
    assert p.get(LlmdSessionParams).session_table_size == 10
    assert p.get(PrebleParams) == PrebleParams(preble_hit_fraction=0.6, preble_imbalance_guard=4)
    assert p.global_fetch_s_per_token == 4e-6
    assert params_from_mapping({"hit_ratio": 0.3, "bailian_lambda": 0.1}).get(SessionParams).hit_ratio == 0.3


def test_preset_derives_models_and_keys_override() -> None:
    preset = PRESETS["qwen3-235b-4xh20"]
    p = params_from_mapping({"preset": "qwen3-235b-4xh20", "tpotSloS": 0.05})
    assert p.cost_model == preset.cost_model
    assert p.decode_step == DecodeStepModel.from_preset_name("qwen3-235b-4xh20")
    assert p.slo.ttft_base_s == preset.slo.ttft_base_s
    assert p.slo.tpot_s == 0.05


@pytest.mark.parametrize(
    ("mapping", "match"),
    [
        ({"slack": 0}, "slack"),
        ({"slack": -1.0}, "slack"),
        ({"hitRatio": 0.0}, "hitRatio"),
        ({"hitRatio": 1.0}, "hitRatio"),
        ({"lambda": 1.2}, "lambda"),
        ({"lambda": "0.7"}, "lambda"),
        ({"overload": 0.9}, "overload"),
        ({"slack": float("inf")}, "slack"),
        ({"mode": "both"}, "mode"),
        ({"costModel": {"cLinS": 0.0, "cAttS": 0.0}}, "cLinS"),
        ({"costModel": {"cLinS": 1e-4}}, "cAttS"),
        ({"costModel": 3}, "costModel"),
        ({"seed": True}, "seed"),
        ({"blockTokens": 0}, "blockTokens"),
        ({"slak": 1.0}, "slak: unknown key"),
        ({"globalFetchSPerToken": -1e-6}, "globalFetchSPerToken"),
        ({"globalSegmentTokens": 0}, "globalSegmentTokens"),
        ({"globalSegmentTokens": 1.5}, "globalSegmentTokens"),
        ({"preset": "h100"}, "preset.*known: qwen3"),
    ],
)
def test_bad_values_name_the_key(mapping: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        params_from_mapping(mapping)


def test_non_mapping_is_rejected() -> None:
    with pytest.raises(ValueError, match="mapping"):
        params_from_mapping([("slack", 1.0)])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value"), [("mode", "both"), ("block_tokens", 0), ("global_segment_tokens", 0)]
)
def test_policy_params_reject_unusable_context_values_directly(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        PolicyParams(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("model", "field", "value"),
    [
        (SMetricParams, "slack", 0.0),
        (SMetricParams, "slack", float("nan")),
        (SessionParams, "hit_ratio", 1.0),
        (OverloadParams, "overload", 0.5),
        (BailianParams, "bailian_lambda", -0.1),
        (LlmdSessionParams, "session_table_size", 0),
    ],
)
def test_params_models_reject_unusable_values_directly(
    model: type[ParamsModel], field: str, value: object
) -> None:
    with pytest.raises(ValueError, match=field):
        model(**{field: value})


def test_every_key_has_one_definition_and_none_shadows_the_context() -> None:
    assert not policy_keys() & CONTEXT_KEYS
    # a second definition of an existing key is refused at registration
    from pydantic import Field

    class Clash(ParamsModel):
        slack: float = Field(2.0, gt=0)

    with pytest.raises(ValueError, match="slack"):
        REGISTRY.with_entries(PolicyEntry("clash", SMetric, Clash))
    with pytest.raises(ValueError, match="twice"):
        REGISTRY.with_entries(PolicyEntry("smetric", SMetric))


def test_fetch_s_per_token() -> None:
    kv = PRESETS["qwen3-30b-h20"].model.kv_bytes_per_token  # 98,304 B
    assert fetch_s_per_token(kv, 200.0) == pytest.approx(98_304 / 25e9)
    with pytest.raises(ValueError):
        fetch_s_per_token(kv, 0.0)
