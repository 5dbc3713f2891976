"""The CRD's router.policy / router.parameters are generated from the policy registry: no drift."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from smetric.operator.gencrd import COMMAND, CRD_PATHS, REPO, check, render, router_schema
from smetric.operator.spec import parse_spec
from smetric.policy.registry import POLICY_NAMES, REGISTRY


def _router(path: Path) -> dict[str, Any]:
    crd = yaml.safe_load(path.read_text(encoding="utf-8"))
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec["properties"]["router"]["properties"]


def test_checked_in_crds_match_the_generator() -> None:
    stale = check()
    assert not stale, (
        f"{', '.join(str(p.relative_to(REPO)) for p in stale)} drifted from the policy models; run: {COMMAND}"
    )


@pytest.mark.parametrize("path", CRD_PATHS, ids=lambda p: str(p.parent.name))
def test_generated_schema_lists_every_policy_and_key(path: Path) -> None:
    router = _router(path)
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


def test_render_is_idempotent_and_replaces_only_the_region() -> None:
    text = CRD_PATHS[0].read_text(encoding="utf-8")
    assert render(render(text)) == render(text)
    mangled = text.replace("- smetric-tiered\n", "", 1)
    assert mangled != text and render(mangled) == text
    with pytest.raises(ValueError, match="BEGIN/END"):
        render("kind: CustomResourceDefinition\n")


def test_every_generated_key_is_accepted_by_the_operator_and_the_picker() -> None:
    params = {
        k: v["default"]
        for k, v in router_schema()["parameters"]["properties"].items()
        if "default" in v and v.get("type") != "object"
    }
    params.update(slack=1.5, overload=3.0, tiered={"footprintWindowS": 10.0})
    spec = parse_spec({"model": {"name": "m"}, "topology": {"replicas": 1}, "router": {"parameters": params}})
    assert spec.router.parameters.policy_owned["slack"] == 1.5


def test_the_command_checks_and_prints() -> None:
    from smetric.operator.cli import main

    assert main(["gen-crd", "--check"]) == 0
