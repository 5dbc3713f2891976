"""Policy config file: defaults, validation errors naming the field, parameters via the policies' parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from smetric.epp.config import ConfigError, load_config, parse_config, policy_params
from smetric.policy import PolicyParams
from smetric.policy.params import SMetricParams
from smetric.policy.registry import DEFAULT_POLICY, DEFAULT_POLICY_WITHOUT_GLOBAL_TIER


def test_defaults_are_the_registry_default_policy() -> None:
    cfg = load_config(None)
    assert (
        cfg.policy.name == DEFAULT_POLICY_WITHOUT_GLOBAL_TIER == "smetric"
        and not cfg.pdDisaggregation.enabled
    )
    assert policy_params(cfg) == PolicyParams()
    assert (cfg.saturation.queueDepthThreshold, cfg.saturation.kvCacheUtilThreshold) == (5, 0.8)


@pytest.mark.parametrize(
    ("parameters", "name"),
    [
        ({}, "smetric"),
        ({"globalFetchSPerToken": 1.3e-5}, "smetric"),
        ({"global_fetch_s_per_token": 1.3e-5}, "smetric"),
        ({"globalFetchSPerToken": None}, "smetric"),
    ],
)
def test_an_omitted_policy_follows_the_pools_global_tier(parameters: dict[str, object], name: str) -> None:
    """A config that sets the global tier's fetch rate describes a pool with one: the tier default."""
    cfg = parse_config({"policy": {"parameters": parameters}})
    assert cfg.policy.name == name
    assert DEFAULT_POLICY == "smetric"


def test_yaml_file_round_trip(tmp_path: Path) -> None:
    f = tmp_path / "epp.yaml"
    f.write_text(
        "policy:\n  name: lmetric\n  parameters: {slack: 1.5}\npdDisaggregation: {enabled: true}\nservedModels: [qwen]\n"
    )
    cfg = load_config(f)
    assert cfg.policy.name == "lmetric" and cfg.pdDisaggregation.enabled and cfg.servedModels == ("qwen",)
    assert policy_params(cfg).get(SMetricParams).slack == 1.5


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"policy": {"name": "nope"}}, "policy.name"),
        ({"policy": {"name": "smetric", "paramters": {}}}, "policy.paramters"),
        ({"pdDisaggregation": {"enabled": "maybe"}}, "pdDisaggregation.enabled"),
        ({"saturation": {"kvCacheUtilThreshold": 2}}, "saturation.kvCacheUtilThreshold"),
        ({"unknownTop": 1}, "unknownTop"),
        ([1, 2], "(top level)"),
    ],
)
def test_bad_config_names_the_field(doc: object, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(doc, "epp.yaml")
    assert "epp.yaml" in str(info.value) and field in str(info.value)


def test_bad_parameters_are_a_config_error() -> None:
    cfg = parse_config({"policy": {"name": "smetric", "parameters": {"slack": -1}}})
    with pytest.raises(ConfigError, match=r"policy\.parameters"):
        policy_params(cfg)


def test_unreadable_or_invalid_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


@pytest.mark.parametrize(
    "text, where",
    [
        ("x: [\n", "line 2, column 1: "),
        ("{bad", "line 1, column 5: "),
        ("a: b\n\tc: d\n", "line 2, column 1: "),
    ],
)
def test_a_yaml_error_is_one_line_with_its_place(tmp_path: Path, text: str, where: str) -> None:
    """PyYAML's message spans several lines (the quoted line and a caret): the picker's and the
    simulator's config errors are one line, naming the file, the line and the column."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    msg = str(info.value)
    assert "\n" not in msg, msg
    assert msg.startswith(f"{bad}: not valid YAML: {where}"), msg
