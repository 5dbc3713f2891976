"""``smetric simulate --param NAME.KEY=VALUE``: every policy parameter, without a file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from smetric.policy.params import ParamsModel, SMetricParams
from smetric.policy.params_mapping import params_from_mapping
from smetric.policy.registry import REGISTRY, PolicyEntry
from smetric.policy.round_robin import RoundRobin
from smetric.policy.tiered_params import SMetricTieredParams
from smetric.sim import cli
from smetric.sim.config import SimConfig
from smetric.sim.param_flags import apply_params, parse_param


def _every_key() -> Iterator[tuple[str, str, object]]:
    """(policy, dotted key, a valid value: the field's default) for every leaf parameter."""
    for entry in REGISTRY:
        for name, info in entry.params.model_fields.items():
            key = info.alias or name
            ann = info.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                for sub, sub_info in ann.model_fields.items():
                    if sub_info.default is not None:
                        yield entry.name, f"{key}.{sub_info.alias or sub}", sub_info.default
            elif info.default is not None:
                yield entry.name, key, info.default


def _text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@pytest.mark.parametrize(("policy", "key", "value"), list(_every_key()), ids=lambda x: str(x))
def test_every_policy_parameter_is_settable(policy: str, key: str, value: object) -> None:
    path, parsed = parse_param(f"{policy}.{key}={_text(value)}")
    assert ".".join(path) == key and parsed == value
    params_from_mapping(
        apply_params({}, [f"{policy}.{key}={_text(value)}"])
    )  # the picker's parser accepts it


def test_values_reach_the_policies_models() -> None:
    given = apply_params(
        {"tiered": {"nodeLocal": False}},
        ["smetric.slack=1.5", "smetric.hit_ratio=0.4", "smetric-tiered.tiered.footprint=false"],
    )
    assert given == {"slack": 1.5, "hitRatio": 0.4, "tiered": {"nodeLocal": False, "footprint": False}}
    params = params_from_mapping(given)
    assert (params.get(SMetricParams).slack, params.get(SMetricParams).hit_ratio) == (1.5, 0.4)
    tiered = params.get(SMetricTieredParams).tiered
    assert not tiered.footprint and not tiered.node_local and tiered.global_aware


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("smetric.slack", "expected NAME.KEY=VALUE"),
        ("nope.slack=1", "NAME must be one of"),
        ("smetric.slak=1", "smetric has no parameter 'slak' \\(its keys: balanceEstimate"),
        ("lmetric.slack=1", "lmetric has no parameter 'slack' \\(its keys: none\\)"),
        ("smetric-tiered.tiered=1", "is a group"),
        ("smetric.slack.x=1", "has no nested keys"),
        ("smetric.slack=[1, 2]", "must be a scalar"),
        ("smetric.slack=: x: [", "not a YAML scalar"),
    ],
)
def test_bad_params_are_clear_errors(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_param(text)


def test_a_value_out_of_range_is_refused_by_the_policies_parser() -> None:
    with pytest.raises(ValueError, match="slack"):
        params_from_mapping(apply_params({}, ["smetric.slack=0"]))


def _spec(*argv: str) -> SimConfig:
    return cli._spec(cli.parser().parse_args(["--trace", "t.jsonl.gz", *argv])).sim


def test_the_cli_flag_equals_the_same_keys_in_a_file(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "policy:\n  name: smetric-tiered\n  parameters: {slack: 1.5, tiered: {footprint: false}}\n",
        encoding="utf-8",
    )
    from_file = _spec("--policies", "smetric-tiered", "--policy-config", str(config))
    from_flags = _spec(
        "--policies", "smetric-tiered", "--param", "smetric-tiered.slack=1.5", "--param",
        "smetric-tiered.tiered.footprint=false",
    )  # fmt: skip
    assert from_flags.policy_parameters == from_file.policy_parameters
    assert from_flags.own_params == from_file.own_params


def test_the_cli_applies_param_after_the_file_and_reports_a_bad_one(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("policy:\n  name: smetric\n  parameters: {slack: 1.5}\n", encoding="utf-8")
    sim = _spec("--policy-config", str(config), "--slack", "2.0", "--param", "smetric.slack=3")
    assert json.loads(sim.policy_parameters) == {"slack": 3}
    assert cli.main(["--trace", "t.jsonl.gz", "--param", "smetric.slak=1"]) == 2
    assert cli.main(["--trace", "t.jsonl.gz", "--param", "smetric.slack=0"]) == 2


def test_a_newly_registered_policys_parameter_is_settable() -> None:
    class QueueParams(ParamsModel):
        queue_weight: float = Field(default=1.0, gt=0)

    registry = REGISTRY.with_entries(PolicyEntry("least-queue", RoundRobin, QueueParams))
    args = cli.parser(registry).parse_args(
        ["--trace", "t.jsonl.gz", "--param", "least-queue.queueWeight=0.5"]
    )
    _, own, _ = cli.policy_parameters(args)
    assert json.loads(own) == {"queueWeight": 0.5}
