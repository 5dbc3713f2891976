"""The whole CRD is generated from SMetricPoolSpec and the policy registry: no drift either way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import Field

from smetric.operator import gencrd, spec
from smetric.operator.crdschema import field_schema, schema_paths, walk
from smetric.operator.gencrd import COMMAND, CRD_PATHS, REPO, check, crd_document, crd_text, router_schema
from smetric.operator.spec import SMetricPoolSpec, parse_spec
from smetric.policy.registry import POLICY_NAMES, REGISTRY


def _spec_of(crd: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def _spec(path: Path) -> dict[str, Any]:
    return _spec_of(yaml.safe_load(path.read_text(encoding="utf-8")))


def _model_paths(model: type[SMetricPoolSpec]) -> set[str]:
    """Every field path of the model tree; router.parameters also holds the registry's keys."""
    return {row.path for row in walk(model)}


def _crd_paths(schema: dict[str, Any]) -> set[str]:
    params = "router.parameters."
    registry_keys = {
        f"{params}{key}"
        for key in router_schema()["parameters"]["properties"]
        if key not in {(f.alias or n) for n, f in spec.PolicyParameters.model_fields.items()}
    }
    paths = set(schema_paths(schema))
    # a registry key's own nested keys (tiered.*) are the policy's, not the spec model's
    return {p for p in paths if not any(p == k or p.startswith(f"{k}.") for k in registry_keys)}


def test_checked_in_crds_match_the_generator() -> None:
    stale = check()
    assert not stale, (
        f"{', '.join(str(p.relative_to(REPO)) for p in stale)} drifted from the models; run: {COMMAND}"
    )


@pytest.mark.parametrize("path", CRD_PATHS, ids=["crds", "chart"])
def test_every_model_field_is_a_crd_property_and_back(path: Path) -> None:
    """Drift in either direction: a model field the CRD lacks (the API server would prune it) or
    a CRD property the model lacks (the operator would refuse it)."""
    model, crd = _model_paths(SMetricPoolSpec), _crd_paths(_spec(path))
    assert model - crd == set(), "model fields missing from the CRD"
    assert crd - model == set(), "CRD properties the model does not have"


class _WithLogLevel(spec.RouterSpec):
    log_level: str = Field(default="info", description="The picker's log level.")


class _PoolWithLogLevel(SMetricPoolSpec):
    router: _WithLogLevel = _WithLogLevel()


def test_a_field_added_to_the_model_only_fails_the_drift_checks() -> None:
    """router.logLevel in the model but not in the checked-in CRD: both checks see it."""
    assert check(model=_PoolWithLogLevel) == list(CRD_PATHS)
    missing = _model_paths(_PoolWithLogLevel) - _crd_paths(_spec(CRD_PATHS[0]))
    assert missing == {"router.logLevel"}
    generated = _spec_of(crd_document(_PoolWithLogLevel))["properties"]["router"]["properties"]["logLevel"]
    assert generated == {"type": "string", "default": "info", "description": "The picker's log level."}


def test_a_property_only_in_the_crd_fails_the_drift_checks(tmp_path: Path) -> None:
    crd = yaml.safe_load(crd_text())
    _spec_of(crd)["properties"]["router"]["properties"]["logLevel"] = {"type": "string"}
    edited = tmp_path / "crd.yaml"
    edited.write_text(gencrd.HEADER + yaml.safe_dump(crd, sort_keys=False), encoding="utf-8")
    assert check([edited]) == [edited]
    assert _crd_paths(_spec(edited)) - _model_paths(SMetricPoolSpec) == {"router.logLevel"}


def test_a_missing_copy_counts_as_drift(tmp_path: Path) -> None:
    assert check([tmp_path / "absent.yaml"]) == [tmp_path / "absent.yaml"]


def test_the_model_carries_the_validations() -> None:
    schema = _spec_of(crd_document())
    rules = schema["x-kubernetes-validations"]
    assert [(r["rule"], r["message"]) for r in rules] == list(spec.CEL_RULES)
    model = schema["properties"]["model"]["properties"]
    assert model["blockSize"] == {
        "type": "integer",
        "default": 16,
        "minimum": 16,
        "maximum": 1024,
        "multipleOf": 16,
    }
    assert model["kvCacheDtype"]["enum"] == ["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]
    assert model["gpuMemoryUtilization"]["exclusiveMinimum"] is True
    assert schema["properties"]["gpus"]["properties"]["shmSize"]["pattern"] == spec.QUANTITY_PATTERN
    assert schema["properties"]["topology"]["default"] == {}  # nested defaults reach the CEL rules
    assert schema["required"] == ["model"]


def test_field_schema_refuses_a_type_without_an_openapi_form() -> None:
    class Odd(spec.ObservabilitySpec):
        when: complex = 0j

    with pytest.raises(TypeError, match="no OpenAPI type"):
        field_schema(Odd.model_fields["when"])


@pytest.mark.parametrize("path", CRD_PATHS, ids=["crds", "chart"])
def test_generated_schema_lists_every_policy_and_key(path: Path) -> None:
    router = _spec(path)["properties"]["router"]["properties"]
    assert tuple(router["policy"]["enum"]) == POLICY_NAMES
    keys = set(router["parameters"]["properties"])
    for model in REGISTRY.param_models():
        for name, info in model.model_fields.items():
            assert (info.alias or name) in keys
    slack = router["parameters"]["properties"]["slack"]
    assert slack["exclusiveMinimum"] is True and slack["minimum"] == 0
    assert "default" not in slack and "Default 1.0" in slack["description"]  # default only in the model
    balance = router["parameters"]["properties"]["balanceEstimate"]  # a Literal field: string + enum
    assert (balance["type"], balance["enum"]) == ("string", ["tier", "local"])
    tiered = router["parameters"]["properties"]["tiered"]["properties"]
    assert (
        "default" not in tiered["footprintWindowS"]
        and "Default 30.0" in tiered["footprintWindowS"]["description"]
    )


def test_every_generated_key_is_accepted_by_the_operator_and_the_picker() -> None:
    params = {
        k: v["default"]
        for k, v in router_schema()["parameters"]["properties"].items()
        if "default" in v and v.get("type") != "object"
    }
    params.update(slack=1.5, overload=3.0, tiered={"footprintWindowS": 10.0})
    parsed = parse_spec(
        {"model": {"name": "m"}, "topology": {"replicas": 1}, "router": {"parameters": params}}
    )
    assert parsed.router.parameters.policy_owned["slack"] == 1.5


def test_the_command_checks_and_prints(capsys: pytest.CaptureFixture[str]) -> None:
    from smetric.operator.cli import main

    assert main(["gen-crd", "--check"]) == 0
    assert gencrd.main([]) == 0
    assert capsys.readouterr().out == crd_text()
