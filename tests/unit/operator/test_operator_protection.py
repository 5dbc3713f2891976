"""``spec.protection`` (NetworkPolicies, PodDisruptionBudgets), named apart from the routing policy;
its former name ``spec.policies`` is still accepted, with a deprecation warning."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from smetric.operator.advice import deprecation_warnings
from smetric.operator.cli import main
from smetric.operator.meta import PoolRef
from smetric.operator.render import render_children
from smetric.operator.spec import InvalidSpecError, parse_spec
from tests.support.operator_spec import (
    _spec_schema,
    apply_defaults,
    minimal,
    validate_with_crd,
)

POOL = PoolRef(name="p", namespace="ns", uid="u")


def _kinds(spec: dict[str, Any]) -> set[str]:
    return {child["kind"] for child in render_children(POOL, parse_spec(spec))}


def _disaggregated(**over: Any) -> dict[str, Any]:
    spec = minimal(**over)
    spec["topology"] = {"mode": "disaggregated", "prefill": {"replicas": 2}, "decode": {"replicas": 2}}
    return spec


def test_protection_switches_the_objects_off() -> None:
    assert {"NetworkPolicy", "PodDisruptionBudget"} <= _kinds(_disaggregated())
    kinds = _kinds(_disaggregated(protection={"networkPolicy": False, "podDisruptionBudget": False}))
    assert not {"NetworkPolicy", "PodDisruptionBudget"} & kinds


def test_the_deprecated_name_still_works_and_is_reported() -> None:
    spec = parse_spec(_disaggregated(policies={"networkPolicy": False}))
    assert spec.protection.network_policy is False and spec.protection.pod_disruption_budget is True
    assert "NetworkPolicy" not in _kinds(_disaggregated(policies={"networkPolicy": False}))
    (warning,) = deprecation_warnings("ns/p", spec)
    assert "spec.policies is deprecated" in warning and "spec.protection" in warning
    assert deprecation_warnings("ns/p", parse_spec(_disaggregated(protection={"networkPolicy": False}))) == []


def test_both_names_must_agree() -> None:
    same = parse_spec(_disaggregated(policies={"networkPolicy": False}, protection={"networkPolicy": False}))
    assert same.protection.network_policy is False
    with pytest.raises(InvalidSpecError, match="protection and its deprecated name policies"):
        parse_spec(_disaggregated(policies={"networkPolicy": False}, protection={"networkPolicy": True}))


def test_the_api_server_does_not_default_protection_over_the_deprecated_name() -> None:
    """No schema default on protection: a CR with only policies keeps its meaning after defaulting."""
    raw = _disaggregated(policies={"podDisruptionBudget": False})
    assert validate_with_crd(raw) == []
    defaulted = apply_defaults(_spec_schema(), copy.deepcopy(raw))
    assert "protection" not in defaulted
    assert parse_spec(defaulted).protection.pod_disruption_budget is False


def test_render_prints_the_deprecation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pool = {
        "apiVersion": "smetric.io/v1alpha1",
        "kind": "SMetricPool",
        "metadata": {"name": "old"},
        "spec": minimal(policies={"networkPolicy": False}),
    }
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(pool), encoding="utf-8")
    assert main(["render", str(path)]) == 0
    assert "SMetricPool old: spec.policies is deprecated" in capsys.readouterr().err
